"""``agentlog runs --key`` (which runs claimed a business key, and how each claim ended)
and the narrowing filters of ``runs`` that read more than the run index
(``--input-contains``), free of Typer: ``reads.runs`` calls them.

``runs --key KEY --json`` writes a list, oldest claim first, of each claiming run's
document (as ``runs --json``; ``agent`` and the times null for a run the store no longer
indexes) with ``key``, ``call``, ``outcome`` (pending, committed, released, compensated),
``claimed_at``, ``settled_at`` and ``sent_key``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import CorruptData, UsageError
from engine.kinds import KeyOutcome

from ..output import Piece, clock, plural, printable, run_doc, when
from . import args
from .views import status_piece

if TYPE_CHECKING:
    from engine import RunSummary
    from engine.log.claims import KeyClaim

    from .session import Session

MAX_KEY = 1000  # --key: a longer one is refused, not looked up
Narrow = Callable[[str], bool]  # a test on a run id: keep the run or not


def narrowing(s: Session, input_contains: str | None = None) -> list[Narrow]:
    """The tests a listed run must also pass, each reading the run's log: a new filter of
    ``runs`` that the index and the runs view cannot answer is one more entry here."""
    tests: list[Narrow] = []
    if input_contains is not None:
        from engine.runtime.run.search import checked_text

        tests.append(InputSearch(s, checked_text(input_contains)))
    return tests


@dataclass
class InputSearch:
    """``--input-contains``: whether a run's input holds ``text``. A run whose log is
    damaged is not a match, and is named afterwards (:func:`say_damaged`), so one damaged
    run does not hide the others; a store it cannot open at all (no cipher key) stops it."""

    s: Session
    text: str
    damaged: list[str] = field(default_factory=list)

    def __call__(self, run_id: str) -> bool:
        from engine.runtime.run.search import input_holds

        try:
            return input_holds(self.s.catalog.store, run_id, self.text)
        except CorruptData:
            self.damaged.append(run_id)
            return False


def say_damaged(narrow: list[Narrow], shown: int = 5) -> None:
    """On stderr, after the listing: the runs a search could not read."""
    for test in narrow:
        damaged = getattr(test, "damaged", [])
        if damaged:
            names = ", ".join(printable(r) for r in damaged[:shown])
            more = f" and {len(damaged) - shown} more" if len(damaged) > shown else ""
            sys.stderr.write(
                f"note: {plural(len(damaged), 'run')} could not be searched (a damaged log; "
                f"see agentlog show RUN): {names}{more}\n"
            )


def kept(narrow: list[Narrow], run_id: str) -> bool:
    return all(test(run_id) for test in narrow)


def paged(rows: list[Any], limit: int | None, offset: int | None) -> list[Any]:
    """``rows`` after skipping ``offset`` of them, at most ``limit``."""
    start = offset or 0
    return rows[start:] if limit is None else rows[start : start + limit]


def key_runs(s: Session, key: str, others: tuple[str | None, ...]) -> int:
    """``agentlog runs --key``: the runs that claimed ``key``, oldest claim first."""
    if any(o is not None for o in others):
        raise UsageError("--key takes no other filter: it lists every run that claimed the key")
    if not key or len(key) > MAX_KEY:
        raise UsageError(f"--key takes a business key of 1 to {MAX_KEY} characters")
    found = s.catalog.key_claims(key)
    index = {r.run_id: r for r in s.catalog.runs()} if found else {}
    if s.as_json:
        s.out.json([claim_doc(c, index.get(c.run_id)) for c in found])
    else:
        s.out.lines(claim_rows(key, found, index, s.store_name))
    return 0


def claim_doc(c: KeyClaim, run: RunSummary | None) -> dict[str, Any]:
    """A claim of a key as ``runs --key --json`` writes it: the run's document, then the claim."""
    doc: dict[str, Any] = {"run_id": c.run_id, "agent": None, "status": None}
    doc.update({"started_at": None, "updated_at": None, "parent_run_id": None})
    if run is not None:
        doc.update(run_doc(run))
    doc.update(
        key=c.key,
        call=c.call,
        outcome=c.outcome,
        claimed_at=when(c.claimed_at),
        settled_at=when(c.settled_at),
        sent_key=c.sent_key,
    )
    return doc


def claim_rows(
    key: str, found: list[KeyClaim], index: dict[str, RunSummary], store: str
) -> list[list[Piece]]:
    """The text lines of ``runs --key``: the key, then one line a claim."""
    shown = args.shown(key, 80)
    if not found:
        return [[(f"no run claimed key {shown} in {store}", "dim")]]
    header = f"{'RUN ID':<32}  {'CALL':>5}  {'OUTCOME':<11}  {'CLAIMED (UTC)':<19}  {'STATUS':<9}"
    rows: list[list[Piece]] = [[("key ", "dim"), (shown, "bold")], [(header + "  AGENT", "bold")]]
    for c in found:
        run = index.get(c.run_id)
        rows.append(
            [
                f"{printable(c.run_id):<32}  {c.call:>5}  ",
                (f"{c.outcome:<11}", "green" if c.outcome == KeyOutcome.COMMITTED else "yellow"),
                f"  {clock(c.claimed_at, date=True):<19}  ",
                status_piece(run.status if run else "-", 9),
                f"  {printable(run.agent) if run else '(not in the run index)'}",
            ]
        )
    return rows
