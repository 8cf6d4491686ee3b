"""A drilled process: one step of a run (``run``, ``resume`` or ``answer``) on the round's
store, with the drill in front of the agent's tools; the drill may kill it at any moment.
Prints the step's result as one JSON line; exit 2 with one line on stderr if the agent
cannot be loaded.

    python -m replay.drill run|resume|answer STORE_URL RUN_ID BOOKS_PATH
"""

from __future__ import annotations

import os
import sys

import msgspec

from engine.errors import AgentlogError
from engine.kinds import Asked

from .books import Books
from .faults import install
from .options import ENV, STEP_ENV, Options, decode

NOT_DONE = "not done"  # the drill's answer to an uncertain effect: it cannot look


def agent_tools(agent: object) -> list[object]:
    """The tools ``agent``'s engine defines (none for a plain function)."""
    from engine.runtime.defs.registry import Registry

    registry = getattr(agent, "registry", None)
    return list(registry.tools()) if isinstance(registry, Registry) else []


def step(cmd: str, url: str, rid: str, books_path: str, options: Options) -> dict[str, object]:
    """Run one step; its result, and whether the run now waits on an uncertain effect."""
    from engine import Engine

    from ..targets import load_target

    agent = load_target(options.target)
    books = Books(books_path)
    install(agent_tools(agent), options, books, os.environ.get(STEP_ENV, cmd))  # type: ignore[arg-type]
    engine = Engine.open(url)
    try:
        if cmd == "resume" and not _started(engine, rid):  # killed before it was recorded
            cmd = "run"
        if cmd == "run":
            r = engine.run(agent, run_id=rid, **options.input)
        elif cmd == "answer":
            r = engine.answer(rid, NOT_DONE)
        else:
            r = engine.resume(rid)
        return {
            "status": str(r.status),
            "output": r.output,
            "error": r.error,
            "uncertain": uncertain(engine, rid),
        }
    finally:
        engine.close()
        books.close()


def _started(engine: object, rid: str) -> bool:
    from engine.errors import RunNotFound

    try:
        return bool(engine.events(rid))  # type: ignore[attr-defined]
    except RunNotFound:
        return False


def uncertain(engine: object, rid: str) -> bool:
    """Whether run ``rid`` waits for a person to say if an effect happened."""
    waiting: dict[int, str] = {}
    for e in engine.events(rid):  # type: ignore[attr-defined]
        if e.type == "human_input_requested":
            waiting[e.data["call"]] = e.data.get("reason", Asked.QUESTION)
        elif e.type == "human_input_provided":
            waiting.pop(e.data["call"], None)
    return any(reason == Asked.UNCERTAIN for reason in waiting.values())


def main(argv: list[str]) -> int:
    cmd, url, rid, books_path = argv
    try:
        doc = step(cmd, url, rid, books_path, decode(os.environ[ENV]))
    except AgentlogError as e:
        print(f"drill: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(msgspec.json.encode(doc).decode() + "\n")
    return 0
