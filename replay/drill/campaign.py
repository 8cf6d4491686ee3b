"""A whole drill: an uncrashed reference run, then rounds killed and recovered until the
kills asked for were made, each in a scratch store of its own (a temporary SQLite file, or
a round of the store ``--store`` names), and the report of what came of them."""

from __future__ import annotations

import random
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec

from engine.errors import UsageError

from . import count
from .books import Books, Op
from .child import agent_tools
from .options import Options
from .rounds import Kills, Round, drive


class Rto(msgspec.Struct, frozen=True):
    median: float | None
    p95: float | None


class Report(msgspec.Struct, frozen=True):
    """``agentlog drill --json``."""

    runs: int
    kills: int
    recoveries: int
    duplicated_effects: int
    lost_effects: int
    final_state_mismatches: int
    rto_s: Rto
    tools_without_verifier: list[str]
    seed: int = 0
    kills_at: dict[str, int] = {}  # kills by failpoint ("timer": by a timer)
    statuses: dict[str, int] = {}  # the drilled runs' final statuses
    reference: str = ""  # the uncrashed reference run's status
    stopped: int = 0  # rounds stopped after too many steps

    @property
    def clean(self) -> bool:
        return not (self.duplicated_effects or self.lost_effects or self.final_state_mismatches)


MAX_ROUNDS = 1000  # rounds at most, however few kills land
IDLE_ROUNDS = 20  # rounds in a row without a kill (no failpoint reached): the drill stops


def _idle(done: list[Round]) -> bool:
    return len(done) >= IDLE_ROUNDS and not any(r.kills for r in done[-IDLE_ROUNDS:])


def drill(options: Options) -> Report:
    """Drill ``options.target``; the report."""
    from ..targets import load_target

    tools = agent_tools(load_target(options.target))
    names = {t.name for t in tools}  # type: ignore[attr-defined]
    unknown = sorted(options.tools_named() - names)
    if unknown:
        raise UsageError(f"drill: {options.target} has no tool {', '.join(unknown)}")
    unverified = {t.name for t in tools if t.side_effect and t.verify is None}  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="agentlog-drill-") as scratch:
        rounds = _Rounds(options, Path(scratch))
        ref = rounds.one("ref", None)
        kills = Kills(options.kills, random.Random(options.seed), options, max(ref.seconds, 0.05))
        done: list[Round] = []
        while (kills.left > 0 or not done) and len(done) < MAX_ROUNDS and not _idle(done):
            done.append(rounds.one(str(len(done)), kills))
        return _report(options, rounds, ref, done, unverified)


class _Rounds:
    """Where each round's store and books are, and what they held at its end."""

    def __init__(self, options: Options, scratch: Path) -> None:
        self.options, self.scratch = options, scratch
        self.logs: dict[str, list[list[Any]]] = {}  # a round's run -> every run's events

    def one(self, name: str, kills: Kills | None) -> Round:
        rid = f"drill-{self.options.seed}-{name}"
        url = round_url(self.options.store, self.scratch, self.options.seed, name)
        r = drive(Round(rid, url, str(self.scratch / f"books-{name}.db")), self.options, kills)
        from engine import Engine

        engine = Engine.open(url)
        try:
            # the round's store holds its run and the run's children (a tree)
            self.logs[rid] = [engine.events(s.run_id) for s in engine.runs()]
        finally:
            engine.close()
        return r


def _report(
    options: Options, rounds: _Rounds, ref: Round, done: list[Round], unverified: set[str]
) -> Report:
    """The figures of the rounds ``done`` against the reference ``ref``; the tools without
    a verifier are those among ``unverified`` the runs called."""
    ref_ops = _ops(ref)
    ref_state = count.final_state(ref.doc, ref.run_id)
    dups = lost = mismatched = 0
    for r in done:
        ops = _ops(r)
        dups += count.duplicated(ops)
        same = r.doc.get("status") == ref.doc.get("status")
        lost += sum(count.lost(events, ops) for events in rounds.logs[r.run_id])
        lost += count.missing(ops, count.sent(ref_ops)) if same else 0
        mismatched += count.final_state(r.doc, r.run_id) != ref_state
    rto = [t for r in done for t in r.rto]
    return Report(
        runs=len(done),
        kills=sum(len(r.kills) for r in done),
        recoveries=sum(r.recoveries for r in done),
        duplicated_effects=dups,
        lost_effects=lost,
        final_state_mismatches=mismatched,
        rto_s=Rto(round(statistics.median(rto), 4) if rto else None, count.percentile(rto, 0.95)),
        tools_without_verifier=sorted(
            unverified & count.called(log for logs in rounds.logs.values() for log in logs)
        ),
        seed=options.seed,
        kills_at=dict(sorted(Counter(k for r in done for k in r.kills).items())),
        statuses=dict(sorted(Counter(str(r.doc.get("status")) for r in done).items())),
        reference=str(ref.doc.get("status")),
        stopped=sum(r.stopped for r in done),
    )


def _ops(r: Round) -> list[Op]:
    books = Books(r.books)
    try:
        return books.ops()
    finally:
        books.close()


def round_url(store: str | None, scratch: Path, seed: int, name: str) -> str:
    """Round ``name``'s store: a SQLite file in ``scratch``, or of the store named."""
    if store is None:
        return f"sqlite:///{scratch / f'round-{name}.db'}"
    parts = urlsplit(store)
    if parts.scheme.startswith("postgres"):
        query = dict(parse_qsl(parts.query))
        query["schema"] = f"{query.get('schema', 'drill')}_{seed}_{name}"
        return urlunsplit(parts._replace(query=urlencode(query)))
    if parts.scheme == "sqlite" and parts.path not in ("", "/", "/:memory:"):
        return urlunsplit(parts._replace(path=f"{parts.path}.drill-{seed}-{name}"))
    raise UsageError(
        f"drill: --store must be a sqlite:/// file or a postgresql:// URL, not {store}"
    )
