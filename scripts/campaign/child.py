"""The child: one step of a run (start, resume, recover, answer, abandon), in a process of
its own that the campaign may kill."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any

NOT_RECOVERED = 5  # a recover child's exit code when it did not take the run over
INLINE_WAIT_ENV = "AGENTLOG_CAMPAIGN_INLINE_WAIT"  # a sleep longer than this suspends
STOPPED = "campaign: outcome not recorded, run stopped:"  # a --store-loss stop, on stderr
FAILING_OK_ENV = "AGENTLOG_CAMPAIGN_FAILING_OK"  # runs fail by design (a supervisor's child)


def agent_module(kind: str) -> Any:
    """The campaign agent's module: ``sync``, ``async``, ``model``, ``tree``, ``saga``
    or ``forks``."""
    if kind in ("saga", "forks"):
        from . import forks_agent, saga_agent

        return saga_agent if kind == "saga" else forks_agent
    if kind == "async":
        from tests.agents import async_campaign_agent

        return async_campaign_agent
    if kind == "tree":
        from . import tree_agent

        return tree_agent
    if kind == "model":
        from . import model_agent

        return model_agent
    from tests.agents import campaign_agent

    return campaign_agent


def agent_of(kind: str) -> Any:
    """The agent a round of ``kind`` starts (``KIND:NAME``: the agent NAME of KIND's
    module)."""
    kind, _, name = kind.partition(":")
    if name:
        return getattr(agent_module(kind), name)
    names = {"async": "async_campaign", "tree": "root", "model": "model_campaign"}
    return getattr(agent_module(kind), names.get(kind, "campaign"))


def _answer(arg: str) -> Any:
    """An answer from the command line: ``given:JSON`` is a result a person gives for an
    uncertain effect (``engine.Given``), anything else the answer itself."""
    from engine import Given

    return Given(json.loads(arg[6:])) if arg.startswith("given:") else arg


def open_engine(url: str) -> Any:
    """An engine on ``url``; with ``$AGENTLOG_CAMPAIGN_INLINE_WAIT`` set, sleeps longer
    than that suspend the run (a durable wait that recover ends) instead of waiting."""
    from engine import Engine, EngineConfig

    wait = os.environ.get(INLINE_WAIT_ENV)
    if wait and "inline_wait" in getattr(EngineConfig, "__dataclass_fields__", {}):
        return Engine.open(url, config=EngineConfig(inline_wait=float(wait)))  # type: ignore[call-arg]
    return Engine.open(url)


def _recover_all(engine: Any) -> int:
    """``engine.recover()``: every run whose owner died, and every waiting run now due."""
    results = engine.recover()
    print(json.dumps([{"run_id": r.run_id, "status": r.status} for r in results]))
    for r in results:
        _stopped(r)
    return 0


def _stopped(r: Any) -> None:
    """Say on stderr (which the campaign reads) that a run stopped because an outcome
    could not be recorded (``--store-loss``)."""
    if r.status == "running" and r.error and "was not recorded" in r.error:
        print(f"{STOPPED} {r.run_id}: {r.error}", file=sys.stderr)


def _cli_recover(url: str) -> int:
    """``agentlog recover``, the command (in this process): 3 (a run paused) is fine, and
    4 (a run failed) where runs fail by design (``$AGENTLOG_CAMPAIGN_FAILING_OK``); on
    anything else its report goes to stderr, where the campaign reads the last line."""
    from replay.cli.entry import run_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_cli(["recover", "--url", url])
    if code in (0, 3) or (code == 4 and os.environ.get(FAILING_OK_ENV)):
        return 0
    sys.stderr.write(out.getvalue())
    return code


def _cli_rewind(url: str, rid: str, to: str, effects: str) -> int:
    """``agentlog rewind RID --to TO --effects EFFECTS``, the command (in this process):
    0, or 3 (the fork paused or stopped: the campaign continues it), else its report on
    stderr."""
    from replay.cli.entry import run_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_cli(["rewind", rid, "--to", to, "--effects", effects, "--url", url])
    if code in (0, 3):
        return 0
    sys.stderr.write(out.getvalue())
    return code


def child(argv: list[str]) -> int:
    """``run URL RID JSON AGENT`` | ``resume URL RID`` | ``recover URL RID`` |
    ``answer URL RID VALUE`` | ``abandon URL RID`` | ``recover-all URL -`` |
    ``cli-recover URL -`` | ``cli-rewind URL RID TO EFFECTS``. Only ``run`` imports the
    agent; the others find it through the import path the run recorded. ``recover``
    exits NOT_RECOVERED if ``engine.recover()`` did not take the run over."""
    from . import storeloss

    cmd, url, rid = argv[:3]
    url = storeloss.arm(url)  # a step armed to lose its store connection after an effect
    if cmd == "cli-recover":
        return _cli_recover(url)
    if cmd == "cli-rewind":
        return _cli_rewind(url, rid, *argv[3:5])
    engine = open_engine(url)
    if cmd == "recover-all":
        return _recover_all(engine)
    if cmd == "run":
        agent = agent_of(argv[4] if len(argv) > 4 else "sync")
        r = engine.run(agent, run_id=rid, **json.loads(argv[3]))
    elif cmd == "recover":
        found = [x for x in engine.recover() if x.run_id == rid]
        if not found:
            return NOT_RECOVERED
        r = found[0]
    elif cmd == "resume":
        r = engine.resume(rid)
    elif cmd == "answer":
        r = engine.answer(rid, _answer(argv[3]))
    elif cmd == "abandon":
        r = engine.abandon(rid)
    else:
        raise SystemExit(f"unknown child command {cmd}")
    print(json.dumps({"status": r.status, "output": r.output, "error": r.error}))
    _stopped(r)
    return 0
