"""Inside a drilled process: the faults a drill injects and the books it keeps, put in
front of every tool call (``policies.invoke``, the one place a tool runs) and every
verifier. A side-effecting tool's send is booked before it goes out; a ``--stub`` tool
never runs (the stub answers ``{"stub": TOOL, "key": KEY}``, once per key if the tool
takes its key); ``--latency`` waits before each attempt; ``--fail`` fails each call's
first attempt (an indeterminate one after sending); ``--malformed`` returns
:data:`MALFORMED` instead of the result."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine.errors import Indeterminate, Logical, Permanent, ToolError, Transient
from engine.kinds import FailureKind
from engine.runtime.call import policies
from engine.runtime.defs.definitions import ToolDef

from .books import Books
from .options import MALFORMED, Options

_ERRORS: dict[FailureKind, type[ToolError]] = {
    FailureKind.TRANSIENT: Transient,
    FailureKind.PERMANENT: Permanent,
    FailureKind.INDETERMINATE: Indeterminate,
    FailureKind.LOGICAL: Logical,
}
Invoke = Callable[[Any, str | None], Any]


def install(tools: list[ToolDef], options: Options, books: Books, step: str) -> None:
    """Put the drill in front of ``tools`` in this process (it never leaves)."""
    for tool in tools:
        if tool.side_effect and tool.verify is not None:
            tool.verify = _verifier(tool, options, books)
    stubbed = set(options.stub)
    real: Invoke = vars(policies)["invoke"]  # the name policies.attempt calls

    def drilled(call: Any, key: str | None) -> Any:
        tool: ToolDef = call.tool
        run = call.ctx.run_id
        books.live(step)
        if (seconds := options.latency.get(tool.name)) is not None:
            time.sleep(seconds)  # the injected latency itself, not a test's sequencing
        kind = options.fail.get(tool.name)
        first = kind is not None and books.first_fault(run, call.number, tool.name)
        if kind is not None and first and kind is not FailureKind.INDETERMINATE:
            raise _ERRORS[kind](f"drill: injected {kind} failure of {tool.name}")
        result = _send(real, call, key, books, stubbed)
        if first:
            raise Indeterminate(f"drill: injected indeterminate failure of {tool.name} (sent)")
        return MALFORMED if tool.name in options.malformed else result

    setattr(policies, "invoke", drilled)  # noqa: B010 (not an exported name)


def _send(real: Invoke, call: Any, key: str | None, books: Books, stubbed: set[str]) -> Any:
    """Run the tool (a stub's answer for a stubbed one), its send booked first."""
    tool: ToolDef = call.tool
    stub = tool.name in stubbed
    if tool.side_effect and key is not None:
        books.send(call.ctx.run_id, tool.name, key, stub=stub)
    return {"stub": tool.name, "key": key} if stub else real(call, key)


def _verifier(tool: ToolDef, options: Options, books: Books) -> Callable[[str], Any]:
    """``tool``'s verifier, its answers booked (a stubbed tool's: the stub's own books)."""
    own = tool.verify
    assert own is not None
    name, stub = tool.name, tool.name in options.stub

    def verify(key: str) -> Any:
        if stub:
            found: Any = {"stub": name, "key": key} if books.has_receipt(name, key) else None
        else:
            found = own(key)
        books.verified("", name, key, found is not None)
        return found

    return verify
