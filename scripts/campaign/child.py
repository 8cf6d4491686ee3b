"""The child: one step of a run (start, resume, recover, answer, abandon), in a process of
its own that the campaign may kill."""

from __future__ import annotations

import json
from typing import Any

NOT_RECOVERED = 5  # a recover child's exit code when it did not take the run over


def agent_module(kind: str) -> Any:
    """The campaign agent's module: ``sync`` or ``async``."""
    if kind == "async":
        from tests.agents import async_campaign_agent

        return async_campaign_agent
    from tests.agents import campaign_agent

    return campaign_agent


def agent_of(kind: str) -> Any:
    module = agent_module(kind)
    return module.async_campaign if kind == "async" else module.campaign


def child(argv: list[str]) -> int:
    """``run URL RID JSON AGENT`` | ``resume URL RID`` | ``recover URL RID`` |
    ``answer URL RID VALUE`` | ``abandon URL RID``. Only ``run`` imports the agent; the
    others find it through the import path the run recorded. ``recover`` exits
    NOT_RECOVERED if ``engine.recover()`` did not take the run over."""
    from engine import Engine

    cmd, url, rid = argv[:3]
    engine = Engine.open(url)
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
        r = engine.answer(rid, argv[3])
    elif cmd == "abandon":
        r = engine.abandon(rid)
    else:
        raise SystemExit(f"unknown child command {cmd}")
    print(json.dumps({"status": r.status, "output": r.output, "error": r.error}))
    return 0
