"""A deploy under unfinished runs, on SQLite files and PostgreSQL: code that gains a tool
call under ``if run.patched("lookup"):`` before the point where old runs stopped (paused
on a question, crashed, sleeping, queued) answers, recovers and resumes them with 0
divergences and each effect once; old runs keep their old path, new runs take the new
one. The same change unguarded diverges, naming ``run.patched``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from agents.kit import Crash, log_of
from conftest import backends

from engine import Engine, NonDeterminismError
from engine.errors import UsageError
from tests.runtime.host import test_engine_time as timed
from tests.runtime.host.test_engine_time import FakeWall

STORES = backends("sqlite", "postgres")
# The engine's fake wall clock, and an engine on it (inline_wait=0: a sleep suspends).
wall, eng = timed.wall, timed.eng
HOW = ("ask", "crash", "sleep", "queued")


class Service:
    """The outside world: what each tool and model was asked, counted."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.crash = True


def _agents(eng: Engine, svc: Service) -> dict[str, Callable[..., Any]]:
    """The agent's code before the deploy (v1), with the patch (v2), with the change
    unguarded (bad), and after the cleanup (v3: the patch deprecated)."""

    @eng.tool(side_effect=True, key=lambda order: f"refund:{order}")
    def refund(order: str) -> str:
        svc.calls[f"refund:{order}"] += 1
        return f"refunded {order}"

    @eng.tool
    def get_order(order: str) -> dict[str, str]:
        svc.calls[f"get_order:{order}"] += 1
        return {"order": order, "state": "delivered"}

    @eng.tool
    def stock(order: str) -> int:
        svc.calls[f"stock:{order}"] += 1
        if svc.crash:
            raise Crash  # the process dies here
        return 3

    def triage(order: str) -> str:
        svc.calls[f"triage:{order}"] += 1
        return "refund"

    def hold(run: Any, order: str, how: str) -> None:
        """Where an old run stopped: a question, a crash, a sleep (a queued run: never
        started)."""
        if how == "ask":
            run.ask("refund it?")
        elif how == "sleep":
            run.sleep(600)
        elif how == "crash":
            run.checkpoint("picked")  # recorded: the log passed the patch point
            stock(order)

    def v1(run: Any, order: str, how: str) -> str:
        plan = run.decide("triage", triage, order)
        hold(run, order, how)
        return f"{plan}: {refund(order)}"

    def v2(run: Any, order: str, how: str) -> str:
        plan = run.decide("triage", triage, order)
        if run.patched("lookup"):
            plan += f" ({get_order(order)['state']})"
        hold(run, order, how)
        return f"{plan}: {refund(order)}"

    def bad(run: Any, order: str, how: str) -> str:
        plan = run.decide("triage", triage, order)
        plan += f" ({get_order(order)['state']})"
        hold(run, order, how)
        return f"{plan}: {refund(order)}"

    def v3(run: Any, order: str, how: str) -> str:
        run.deprecate_patch("lookup")
        plan = run.decide("triage", triage, order) + f" ({get_order(order)['state']})"
        hold(run, order, how)
        return f"{plan}: {refund(order)}"

    return {"v1": v1, "v2": v2, "bad": bad, "v3": v3}


def _old_runs(eng: Engine, code: dict[str, Callable[..., Any]]) -> tuple[Any, dict[str, str]]:
    """One run of v1 stopped each way: paused, crashed, sleeping, queued."""
    agent = eng.agent(code["v1"], name="support")
    assert eng.run(agent, run_id="asked", order="asked", how="ask").status == "paused"
    with pytest.raises(Crash):
        eng.run(agent, run_id="crashed", order="crashed", how="crash")
    assert eng.run(agent, run_id="slept", order="slept", how="sleep").status == "waiting"
    eng.enqueue(agent, run_id="queued", order="queued", how="queued")
    status = {rid: eng.state(rid).status for rid in ("asked", "crashed", "slept", "queued")}
    assert status == {
        "asked": "paused",
        "crashed": "running",
        "slept": "waiting",
        "queued": "queued",
    }
    return agent, status


def _types(eng: Engine, run_id: str) -> list[str]:
    return [t for _, t, _ in log_of(eng, run_id)]


@STORES
def test_a_patched_call_before_the_stop_lets_every_old_run_finish_on_its_old_path(
    eng: Engine, wall: FakeWall
) -> None:
    """Deployed under a paused, a crashed, a sleeping and a queued run: each finishes
    with the new code, verifies clean, and calls each tool once; the runs that had
    passed the patch point keep the old path (no marker, no get_order), the queued run and
    a new run take the new one (a marker each)."""
    svc = Service()
    code = _agents(eng, svc)
    _old_runs(eng, code)
    eng.agent(code["v2"], name="support")  # the deploy
    svc.crash = False
    done = {
        "asked": eng.answer("asked", "yes"),
        "crashed": eng.resume("crashed"),
        "queued": eng.resume("queued"),
    }
    wall.now += 601
    [slept] = eng.recover()
    done["slept"] = slept
    agent = eng.agent(code["v2"], name="support")
    assert eng.run(agent, run_id="new", order="new", how="ask").status == "paused"
    done["new"] = eng.answer("new", "yes")
    outputs = {rid: (r.status, r.output) for rid, r in done.items()}
    assert outputs == {
        "asked": ("completed", "refund: refunded asked"),
        "crashed": ("completed", "refund: refunded crashed"),
        "slept": ("completed", "refund: refunded slept"),
        "queued": ("completed", "refund (delivered): refunded queued"),
        "new": ("completed", "refund (delivered): refunded new"),
    }
    for rid in done:
        assert eng.verify(rid).status == "completed"  # 0 divergences
        assert svc.calls[f"refund:{rid}"] == 1 and svc.calls[f"triage:{rid}"] == 1
        marked = _types(eng, rid).count("patch_marked")
        assert marked == (rid in ("queued", "new")), rid
        assert svc.calls[f"get_order:{rid}"] == marked
    assert svc.calls["stock:crashed"] == 2  # the crashed read, then its resume


@STORES
def test_the_same_change_unguarded_diverges_naming_run_patched(eng: Engine) -> None:
    """Without ``run.patched``, the paused run cannot be answered: NonDeterminismError
    at the call that moved, pointing at ``run.patched``; nothing is written."""
    svc = Service()
    code = _agents(eng, svc)
    _old_runs(eng, code)
    eng.agent(code["bad"], name="support")
    before = log_of(eng, "asked")
    with pytest.raises(NonDeterminismError, match=r"call 2.*run\.patched"):
        eng.answer("asked", "yes")
    assert log_of(eng, "asked") == before and svc.calls["get_order:asked"] == 0


@STORES
def test_a_deprecated_patch_replays_runs_with_its_marker_and_without_and_records_nothing(
    eng: Engine,
) -> None:
    """After the cleanup (``deprecate_patch`` and the patched path only), a run recorded
    with the marker and one recorded by the cleaned code both verify and resume; the
    cleaned code records no marker. A patch needs a name."""
    svc = Service()
    code = _agents(eng, svc)
    agent = eng.agent(code["v2"], name="support")
    with_marker = eng.run(agent, run_id="marked", order="m", how="ask")
    assert "patch_marked" in _types(eng, "marked")
    agent = eng.agent(code["v3"], name="support")
    without = eng.run(agent, run_id="plain", order="p", how="ask")
    assert "patch_marked" not in _types(eng, "plain")
    for r in (with_marker, without):
        assert eng.verify(r.run_id).status == "paused"
        assert eng.answer(r.run_id, "yes").status == "completed"
        assert eng.verify(r.run_id).status == "completed"
    assert svc.calls["get_order:m"] == svc.calls["get_order:p"] == 1

    def nameless(run: Any) -> bool:
        return bool(run.patched(""))

    failed = eng.run(eng.agent(nameless))
    assert failed.status == "failed" and "a patch needs a name" in str(failed.error)


@STORES
def test_a_patch_after_the_last_call_of_a_completed_run_verifies_clean(eng: Engine) -> None:
    """A completed run's log ends where the code now asks for a patch after its last
    call: the log passed that point (the run returned), so verify takes the old path."""
    svc = Service()
    code = _agents(eng, svc)
    done = eng.run(eng.agent(code["v1"], name="support"), order="o", how="queued")
    assert done.status == "completed"

    def v4(run: Any, order: str, how: str) -> str:
        out = code["v1"](run, order, how)
        if run.patched("receipt"):
            out += " (receipt sent)"
        return str(out)

    eng.agent(v4, name="support")
    assert eng.verify(done.run_id).status == "completed"
    new = eng.run(eng.agent(v4, name="support"), order="n", how="queued")
    assert new.output == "refund: refunded n (receipt sent)"
    assert eng.verify(new.run_id).status == "completed"


@STORES
def test_verify_all_names_every_divergent_unfinished_run_and_executes_nothing(
    eng: Engine,
) -> None:
    """``engine.verify_all``: the unguarded change diverges for the runs past its point
    (paused, crashed, sleeping; the queued run has not reached it), the patched one for
    none; a finished run only when its status is asked for; ``agent`` picks an agent;
    nothing is called or written."""
    svc = Service()
    code = _agents(eng, svc)
    _old_runs(eng, code)
    done = eng.run(eng.agent(code["v1"], name="support"), run_id="done", order="d", how="queued")
    assert done.status == "completed"
    logs = {rid: log_of(eng, rid) for rid in ("asked", "crashed", "slept", "queued", "done")}
    calls = dict(svc.calls)
    eng.agent(code["bad"], name="support")
    found = eng.verify_all()
    assert sorted(d["run_id"] for d in found) == ["asked", "crashed", "slept"]
    assert all("run.patched" in d["divergence"] for d in found)
    assert [d["run_id"] for d in eng.verify_all(status="completed")] == ["done"]
    assert eng.verify_all(agent="elsewhere:other") == []
    with pytest.raises(UsageError, match="status must be one of"):
        eng.verify_all(status="nonsense")
    eng.agent(code["v2"], name="support")
    assert eng.verify_all() == [] and eng.verify_all(status="completed") == []
    assert dict(svc.calls) == calls
    assert {rid: log_of(eng, rid) for rid in logs} == logs


def test_verify_all_skips_an_imported_run_not_adopted(eng: Engine, tmp_path: Any) -> None:
    """An imported run is history until adopted: ``verify_all`` passes over it (``verify``
    of it is refused), even when the code loaded now would not replay it."""
    from replay.transfer import export_lines, import_run

    svc = Service()
    code = _agents(eng, svc)
    _old_runs(eng, code)
    data = b"".join(export_lines(eng, "asked"))
    other = Engine.open(f"sqlite:///{tmp_path}/other.db")
    try:
        other.agent(code["bad"], name="support")
        assert import_run(other, data) == ("asked", True)
        assert other.verify_all() == []
        with pytest.raises(UsageError):
            other.verify("asked")
    finally:
        other.close()


def test_the_timeline_shows_the_patch_taken_and_the_version(
    eng: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentlog timeline``: the run's version on its start, the patch on a line."""
    from replay.cli.entry import run_cli

    version = "7"
    svc = Service()
    code = _agents(eng, svc)
    r = eng.run(eng.agent(code["v2"], name="support", version=version), order="t", how="ask")
    capsys.readouterr()
    assert run_cli(["timeline", r.run_id, "--url", eng.url or ""]) == 0
    out = capsys.readouterr().out
    assert "⚑ patch 'lookup'  taken after call 1" in out and f"version {version}" in out
