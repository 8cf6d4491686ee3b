"""Forks and cross-agent locks, against a fencing service (SQLite and PostgreSQL): a
rewind to a position inside a lock block forks from before the acquire, so the fork takes
the lock afresh under a new fence while the parent may still hold the old one; a call's
argument hash leaves the fence out, so a fork that passes its new fence to a tool (the
pattern docs/locks.md teaches) reuses its parent's effect instead of being refused by the
ledger for "different arguments"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from agents.fencing import FencingService, fencing_service
from agents.kit import log_of
from conftest import backends

from engine import Engine, Permanent
from engine.runtime.call import entry as calls

STORES = backends("sqlite", "postgres")


@pytest.fixture
def svc() -> Iterator[FencingService]:
    with fencing_service() as s:
        yield s


def _post(svc: FencingService, resource: str, fence: int, step: int, key: str) -> dict[str, Any]:
    body = {"resource": resource, "fence": fence, "holder": key.split(":")[0], "step": step}
    r = httpx.post(svc.url, json={**body, "key": key})
    if r.status_code == 409:
        raise Permanent(f"stale fence {fence} for {resource}")
    return {"fence": fence, "step": step}


def _fences(eng: Engine, run_id: str) -> list[int]:
    return [d["fence"] for _, t, d in log_of(eng, run_id) if t == "lock_acquired"]


def _sources(eng: Engine, run_id: str) -> list[str]:
    return [d["source"] for _, t, d in log_of(eng, run_id) if t == "tool_succeeded"]


@STORES
def test_a_fork_inside_a_lock_block_takes_the_lock_afresh(eng: Engine, svc: FencingService) -> None:
    """The parent pauses inside its block (holding the lock with fence 1) and is rewound
    to a checkpoint inside it: the fork forks from before the acquire, waits for the
    parent's hold to expire, takes fence 2 and reuses the parent's first write. Both then
    go on: the service never sees two holders with one fence, and step 1 is written once."""

    @eng.tool(side_effect=True)
    def write(resource: str, fence: int, step: int, *, idempotency_key: str) -> dict[str, Any]:
        return _post(svc, resource, fence, step, idempotency_key)

    @eng.agent
    def holder(run: Any) -> list[Any]:
        with run.lock("doc", ttl=0.5) as fence:
            first = write("doc", fence, 1)
            run.checkpoint("inside")
            answer = run.ask("which step?")
            return [first, write("doc", fence, int(answer))]

    parent = eng.run(holder)
    assert parent.status == "paused", parent.error
    fork = eng.rewind(parent.run_id, to="inside")
    assert fork.status == "paused" and _fences(eng, fork.run_id) == [2]
    assert eng.answer(parent.run_id, "2").status == "completed"
    assert eng.answer(fork.run_id, "3").status == "completed"
    svc.check_one_holder_at_a_time()
    assert [(e[1], e[3]) for e in svc.accepted] == [(1, 1), (1, 2), (2, 3)]
    assert _sources(eng, fork.run_id) == ["parent", "executed"]


@STORES
@pytest.mark.parametrize("effects", ["reuse", "resend"])
def test_a_fork_passing_its_new_fence_is_not_refused(
    eng: Engine, svc: FencingService, effects: str
) -> None:
    """A keyed write taking the fence as an argument, rewound to before the block: the
    fork holds fence 2, its write is the parent's (reused, or the ledger's under the same
    key), and the service received it once."""

    @eng.tool(side_effect=True, key=lambda resource, fence, step: f"w:{resource}:{step}")
    def keyed(resource: str, fence: int, step: int, *, idempotency_key: str) -> dict[str, Any]:
        return _post(svc, resource, fence, step, idempotency_key)

    @eng.agent
    def holder(run: Any) -> Any:
        run.checkpoint("start")
        with run.lock("doc", ttl=30) as fence:
            return keyed("doc", fence, 1)

    parent = eng.run(holder)
    fork = eng.rewind(parent.run_id, to="start", effects=effects)
    assert (fork.status, fork.error) == ("completed", None)
    assert fork.output == {"fence": 1, "step": 1}  # the parent's effect, not a second one
    assert _fences(eng, fork.run_id) == [2]
    assert len(svc.accepted) == 1 and fork.standing == ()


@STORES
def test_a_call_recorded_with_its_fence_hashed_still_replays(
    eng: Engine, svc: FencingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run paused inside its block, its write recorded with the fence in the argument
    hash (as versions before fences were left out recorded it), is answered after the
    upgrade: no divergence, and the write is not sent again."""

    @eng.tool(side_effect=True)
    def write(resource: str, fence: int, step: int, *, idempotency_key: str) -> dict[str, Any]:
        return _post(svc, resource, fence, step, idempotency_key)

    @eng.agent
    def holder(run: Any) -> Any:
        with run.lock("doc", ttl=30) as fence:
            first = write("doc", fence, 1)
            run.ask("go on?")
            return first

    monkeypatch.setattr(calls, "hashed_args", lambda bound, named: named)  # the old hash
    parent = eng.run(holder)
    monkeypatch.undo()
    assert parent.status == "paused"
    done = eng.answer(parent.run_id, "yes")
    assert (done.status, done.output) == ("completed", {"fence": 1, "step": 1})
    assert len(svc.accepted) == 1
