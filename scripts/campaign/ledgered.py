"""What the saga and forks workloads share: runs (and their trees) driven to their end
under kills as the tree workload drives them, rewinds through ``agentlog rewind`` in
killed processes, and the ledger's books (campaign/ledger.py) as the judge.

A rewind step may be killed before its fork exists (it is launched again: undos already
recorded are not made twice, one interrupted is made again and the ledger's refund is
idempotent) or after (the fork is continued like any run, never forked again). At the
end every effect a round must leave stands exactly once at the ledger: none twice
(duplicated), none missing (lost); a refunded effect is counted as refunded.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from engine.kinds import RunStatus

from .child import FAILING_OK_ENV, INLINE_WAIT_ENV
from .ledger import URL_ENV, Ledger
from .report import Report
from .rounds import RUN_FAILPOINTS, Campaign
from .tree import INLINE_WAIT, TreeCampaign

REWIND_TRIES = 40  # launches of one rewind before the round gives up on it (reported)


class LedgerCampaign(TreeCampaign):
    """Rounds judged by the ledger; a subclass's ``round`` says what a round runs and
    which ops it must leave standing (``self.wanted``)."""

    pair = 1
    # The engine's points this workload's steps reach (no point a step never reaches: the
    # campaign would spend launches trying it); a rewind's compensations besides.
    run_failpoints: tuple[str, ...] = RUN_FAILPOINTS

    def __init__(
        self, url: str, workdir: Path, seed: int, verbose: bool, launcher: str, recover: float
    ) -> None:
        self.ledger = Ledger()
        env = {URL_ENV: self.ledger.url, "AGENTLOG_URL": url, INLINE_WAIT_ENV: str(INLINE_WAIT)}
        env[FAILING_OK_ENV] = "1"  # a breaker's failure is a recovered run failing
        Campaign.__init__(self, url, workdir, seed, 1, verbose, launcher, "sync", recover, env)
        self.report.tree = self.report.ledger = True
        self.kinds: dict[str, str] = {}  # run id -> the agent its "run" step starts
        self.wanted: Counter[str] = Counter()  # op -> how many must stand at the end
        self.rewound: list[tuple[str, str]] = []  # (parent, fork)

    def step_kind(self, args: list[str]) -> str:
        """A team's first step takes seconds, a rewind's or a finished run's resume less:
        each kind of step is timed apart, so a timer kill lands inside it."""
        return " ".join(args[:1] + args[4:5])

    def step(self, rid: str, data: dict[str, Any], root: Any, nodes: list[Any]) -> list[str]:
        if root is None:
            return ["run", self.url, rid, json.dumps(data), self.kinds[rid]]
        if root.status == RunStatus.PAUSED:
            asker = self.asker(nodes)
            if asker is not None:
                return ["answer", self.url, asker, self.truth_of(asker)]
        return super().step(rid, data, root, nodes)

    def truth_of(self, rid: str) -> str:
        """The truthful answer to a run's question whether an effect happened (every
        tool here has a verifier: a question is reported, then answered)."""
        events = self.events(rid)
        asked = [e for e in events if e.type == "human_input_requested"][-1]
        self.report.anomalies.append(f"run {rid} asked a person: {asked.data.get('question')}")
        call = asked.data.get("call")
        intent = [e for e in events if e.type == "tool_invoked" and e.data["call"] == call]
        key = (intent[-1].data.get("sent_key") or intent[-1].data.get("key")) if intent else None
        with self.ledger.lock:
            found = self.ledger.books.by_key.get(str(key))
        self.report.answers["not done" if found is None else "done"] += 1
        return "not done" if found is None else "given:" + json.dumps({"receipt": found.receipt})

    # --- a run started, a run rewound ----------------------------------------------

    def start(self, rid: str, data: dict[str, Any], kind: str) -> None:
        """Launch ``rid``'s first step (killed or not) until its run exists."""
        self.kinds[rid] = kind
        while not self.events(rid):
            self.launch(["run", self.url, rid, json.dumps(data), kind], self.run_failpoints)

    def fork_of(self, rid: str) -> str | None:
        """The fork a rewind of ``rid`` made, if one exists."""
        for row in self.engine.store.runs():
            if row.parent_run_id == rid:
                head = self.events(row.run_id)[:1]
                if head and head[0].data.get("fork_position") is not None:
                    return str(row.run_id)
        return None

    def rewind(self, rid: str, to: str, effects: str) -> str | None:
        """Rewind ``rid`` to ``to`` by ``agentlog rewind`` in killed steps until its fork
        exists, then drive the fork to its end; the fork (None: reported)."""
        for _ in range(REWIND_TRIES):
            fork = self.fork_of(rid)
            if fork is not None:
                self.rewound.append((rid, fork))
                self.drive(fork, {})
                return fork
            points = ("in_compensation", *self.run_failpoints)
            lost = self.report.ended_by_store_loss
            code = self.launch(["cli-rewind", self.url, rid, to, effects], points)
            if code not in (0, -signal.SIGKILL) and lost == self.report.ended_by_store_loss:
                break  # a failure of its own, not the store's loss (reported by launch)
        self.report.anomalies.append(f"rewind of {rid} to {to!r} made no fork")
        return None

    def finished(self, rid: str, want: Any) -> None:
        """The run ended completed with ``want`` as its output (else a mismatch)."""
        state = self.engine.state(rid)
        if state.status != RunStatus.COMPLETED or state.output != want:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"run {rid}: {state.status} {state.output!r} != {want!r} ({state.error})"
            )
        self._check_log(rid)

    # --- the books -----------------------------------------------------------------

    def compare_books(self) -> None:
        judge_books(self.ledger, self.wanted, self.report)

    def close(self) -> None:
        super().close()
        self.ledger.close()


def judge_books(ledger: Ledger, wanted: Counter[str], report: Report) -> None:
    """The ledger's books against ``wanted`` (op -> how many must stand): duplicated,
    lost, refunded effects and two lock holders, into ``report``."""
    with ledger.lock:
        books = ledger.books
        standing, refunds = books.standing(), books.refunds()
        two = books.two_holders()
        report.stale_writes_refused = len(books.refused)
        report.refused_writes = list(books.refused)
        report.ledger_replays = books.replays
    report.duplicated_effects = sum(max(0, standing[op] - n) for op, n in wanted.items())
    report.lost_effects = sum(max(0, n - standing[op]) for op, n in wanted.items())
    report.refunded_effects = sum(refunds.values())
    extra = sorted(op for op in standing if op not in wanted)
    if extra:
        report.final_state_mismatches += 1
        report.anomalies.append(f"effects no round should make: {extra}")
    report.two_lock_holders += len(two)
    report.anomalies += [f"two holders at the ledger: {t}" for t in two]
