"""The status sets are named once, in engine/kinds.py: every status is in exactly one of
``LIVE``, ``SUSPENDED`` and ``SETTLED``, ``FINAL`` is the part of ``SETTLED`` nothing
reopens, and no other module of the product writes its own tuple or set of statuses."""

from __future__ import annotations

import ast
from pathlib import Path

from engine.kinds import FINAL, LIVE, SETTLED, SUSPENDED, RunStatus

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "projections", "replay", "scripts")
OWNER = "engine/kinds.py"
STATUS_NAMES = {s.name for s in RunStatus}
STATUS_VALUES = {s.value for s in RunStatus}


def test_every_status_is_live_suspended_or_settled_exactly_once() -> None:
    assert set(RunStatus) == LIVE | SUSPENDED | SETTLED
    assert not LIVE & SUSPENDED and not LIVE & SETTLED and not SUSPENDED & SETTLED
    assert FINAL == {RunStatus.COMPLETED, RunStatus.ABANDONED, RunStatus.DRY_RUN} < SETTLED
    assert {RunStatus.FAILED} == SETTLED - FINAL  # resumable: resume re-attempts the failure


def test_a_stored_plain_string_is_in_its_set() -> None:
    """Sets hold the StrEnum members; a status read back as a plain string still matches."""
    assert "failed" in SETTLED and "waiting" in SUSPENDED and "new" in LIVE
    assert "failed" not in FINAL


def _is_status(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id == "RunStatus" and node.attr in STATUS_NAMES
    return isinstance(node, ast.Constant) and node.value in STATUS_VALUES


def status_collections(source: str, name: str) -> list[int]:
    """Lines of ``source`` holding a tuple, list or set literal of two or more statuses."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            statuses = [e for e in node.elts if _is_status(e)]
            if len(statuses) >= 2 and len(statuses) == len(node.elts):
                found.append(node.lineno)
    return found


def test_no_module_but_kinds_writes_a_set_of_statuses() -> None:
    copies = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != OWNER:
                copies += [f"{rel}:{n}" for n in status_collections(path.read_text(), rel)]
    assert not copies, "status sets written outside engine/kinds.py: " + ", ".join(copies)


def test_the_scan_sees_a_copy_written_with_members_or_strings() -> None:
    source = (
        "A = (RunStatus.COMPLETED, RunStatus.FAILED)\n"
        "B = frozenset({'paused', 'waiting'})\n"
        "C = ('completed', 'x')\n"  # not all statuses: another vocabulary
    )
    assert status_collections(source, "scratch.py") == [1, 2]
