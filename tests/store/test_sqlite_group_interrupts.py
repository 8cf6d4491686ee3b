"""Ctrl-C anywhere in SQLite group commit (engine/store/sqlite_group.py): a KeyboardInterrupt
raised in the main thread at each line of the group's code it runs, in turn (a trace
function raises it there, as a signal handler would between two lines), as the batch's
leader and as a follower. Whatever line it lands on, no caller hangs, no caller returns
success for a row that is not in the file, none is told "none of them was written" for one
that is, and the group serves the next append."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from test_sqlite_group_commit import _datastore, _insert

from engine.polling import poll_until
from engine.store import sqlite_group
from engine.store.sqlite_group import GroupCommit

PATIENCE = 10.0  # seconds: a caller still waiting after this is stuck for good
CODE: set[CodeType] = {
    f.__code__
    for f in (*vars(GroupCommit).values(), *vars(sqlite_group).values())
    if callable(f)
    and getattr(f, "__module__", "") == sqlite_group.__name__
    and hasattr(f, "__code__")
}


def _tracer(line: int | None, seen: set[int]) -> Callable[..., Any]:
    """Records the lines of the group's code this thread runs; raises KeyboardInterrupt
    the first time it reaches ``line``."""
    fired: list[int] = []

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            seen.add(frame.f_lineno)
            if frame.f_lineno == line and not fired:
                fired.append(line)
                raise KeyboardInterrupt
        return local

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code in CODE else None

    return trace


def _call(group: GroupCommit, i: int, out: dict[int, Any]) -> None:
    try:
        out[i] = group.run(_insert(f"INSERT INTO parent VALUES ({i})"))
    except BaseException as e:
        out[i] = e


def _started(group: GroupCommit, i: int, out: dict[int, Any]) -> threading.Thread:
    t = threading.Thread(target=_call, args=(group, i, out), daemon=True)
    t.start()
    return t


def _scenario(path: Path, line: int | None, lead: bool, seen: set[int]) -> list[str]:
    """One run: the main thread appends row 0, two others rows 1 and 2, in one batch led
    by the main thread (``lead``) or by another; the interrupt at ``line``. The broken
    promises."""
    path.unlink(missing_ok=True)
    ds = _datastore(path)
    group = GroupCommit(ds)
    out: dict[int, Any] = {}
    others: list[threading.Thread] = []
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the batch gathers while the write lock is away
    main_done = threading.Event()

    def gather() -> None:
        if lead:
            poll_until(lambda: group.waiting >= 1 or main_done.is_set(), PATIENCE)
        others.extend(_started(group, i, out) for i in (1, 2))
        want = 3 if lead else 2
        poll_until(lambda: group.waiting >= want or main_done.is_set(), PATIENCE)
        holder.execute("COMMIT")

    if not lead:
        others.append(_started(group, 1, out))
        poll_until(lambda: group.waiting >= 1, PATIENCE)

    def release() -> None:
        poll_until(lambda: group.waiting >= 2 or main_done.is_set(), PATIENCE)
        holder.execute("COMMIT")

    helper = threading.Thread(target=gather if lead else release, daemon=True)
    helper.start()
    sys.settrace(_tracer(line, seen))
    try:
        out[0] = group.run(_insert("INSERT INTO parent VALUES (0)"))
    except BaseException as e:
        out[0] = e
    finally:
        sys.settrace(None)
        main_done.set()
    return _broken(path, ds, group, holder, [helper, *others], out)


def _broken(
    path: Path,
    ds: Any,
    group: GroupCommit,
    holder: sqlite3.Connection,
    threads: list[threading.Thread],
    out: dict[int, Any],
) -> list[str]:
    broken = []
    for t in threads:
        t.join(PATIENCE)
        if t.is_alive():
            broken.append(f"{t.name} hangs")
    with contextlib.suppress(sqlite3.Error):
        holder.execute("ROLLBACK")
    holder.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = {r[0] for r in db.execute("SELECT id FROM parent")}
    for i, got in sorted(out.items()):
        if isinstance(got, int) and (got != i or i not in rows):
            broken.append(f"append {i} returned {got} and its row is not in the file")
        if got is None:
            broken.append(f"append {i} returned nothing")
        if isinstance(got, Exception) and "none of them was written" in str(got) and i in rows:
            broken.append(f"append {i} was told it was not written, and it is: {got}")
    after: dict[int, Any] = {}
    last = _started(group, 9, after)
    last.join(PATIENCE)
    if after.get(9) != 9:
        broken.append(f"the next append got {after.get(9, 'no answer')!r}")
    if not last.is_alive():
        ds.close()
    return broken


def _every_line(tmp_path: Path, lead: bool) -> None:
    seen: set[int] = set()
    assert _scenario(tmp_path / "dry.db", None, lead, seen) == []
    assert seen, "the trace saw none of the group's lines"
    failures = {}
    for line in sorted(seen):
        broken = _scenario(tmp_path / "agentlog.db", line, lead, set())
        if broken:
            failures[line] = broken
    assert not failures, "\n".join(f"line {n}: {b}" for n, b in failures.items())


def test_an_interrupt_at_any_line_of_the_leader_breaks_no_promise(tmp_path: Path) -> None:
    _every_line(tmp_path, lead=True)


def test_an_interrupt_at_any_line_of_a_follower_breaks_no_promise(tmp_path: Path) -> None:
    _every_line(tmp_path, lead=False)
