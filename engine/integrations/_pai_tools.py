"""pydantic-ai tool calls as durable tool calls (engine.integrations.pydantic_ai).

Each pydantic-ai tool stands as an engine tool ``{agent}.{tool}`` with its policies; its
result, or the control flow it raised (a retry prompt, a deferral), is recorded as
pydantic-ai records a durable tool call (``CallToolResult``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pydantic import TypeAdapter
from pydantic_ai.durable_exec import CallToolResult
from pydantic_ai.durable_exec._toolset import unwrap_tool_call_result, wrap_tool_call_result
from pydantic_ai.tools import RunContext as ToolContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset

from ..errors import UsageError
from ..runtime.declare.wrappers import ToolOptions
from ..runtime.run.context import current

if TYPE_CHECKING:
    from ..runtime.engine import Engine

__all__ = ["TOOL_OPTIONS", "DurableToolset", "ToolCalls", "check_options"]

_RESULT: TypeAdapter[Any] = TypeAdapter(CallToolResult)
# The recorded kinds of a tool call that returned (pydantic-ai's CallToolResult).
_RETURNED = frozenset({"tool_return", "tool_content_result"})
# The options a pydantic-ai tool takes, as @engine.tool does (its name is the agent's).
TOOL_OPTIONS = ToolOptions.__optional_keys__ - {"name"}

# The call a durable tool's body makes: pydantic-ai's toolset, run context and tool (not
# data, so not arguments: they reach the body, which runs on the agent's loop, this way).
_calling: contextvars.ContextVar[tuple[AbstractToolset[Any], ToolContext[Any], ToolsetTool[Any]]]
_calling = contextvars.ContextVar("agentlog_pydantic_ai_tool")


@dataclass
class ToolCalls:
    """The engine's durable tools standing for one agent's pydantic-ai tools, made on
    first call: ``{prefix}.{tool}``, with ``defaults`` and the tool's own ``options``."""

    engine: Engine
    prefix: str
    defaults: Mapping[str, Any]
    options: Mapping[str, Mapping[str, Any]]
    made: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def define(self, toolset: AbstractToolset[Any]) -> None:
        """Define the tools of a function toolset now, so that a process that never calls
        them (one that abandons a run) finds their compensations; others on first call."""
        if isinstance(toolset, FunctionToolset):
            for name in toolset.tools:
                self.durable(name)

    def durable(self, name: str) -> Callable[..., Any]:
        tool = self.made.get(name)
        if tool is None:
            options = cast("ToolOptions", {**self.defaults, **self.options.get(name, {})})
            options["name"] = f"{self.prefix}.{name}"
            _speak_plainly(options)
            tool = self.made[name] = self.engine.tool(_body(name), **options)
        return tool


def check_options(what: str, given: Mapping[str, Any], known: frozenset[str]) -> None:
    """A misspelt option is refused when the agent is wrapped, not at its first call."""
    unknown = sorted(set(given) - known)
    if unknown:
        raise UsageError(f"{what} take {sorted(known)}, not {unknown}")


def _speak_plainly(options: ToolOptions) -> None:
    """A tool's ``verify`` returns, and its ``compensate`` takes, the tool's own result;
    the log holds it as pydantic-ai records a tool call's (``CallToolResult``)."""
    verify, compensate = options.get("verify"), options.get("compensate")
    if verify is not None:
        options["verify"] = lambda key: _as_recorded(verify(key))
    if compensate is not None:
        options["compensate"] = _undo(compensate)


def _as_recorded(value: Any) -> Any:
    """A tool's result as its durable call records it (None: no result)."""
    if value is None:
        return None
    result = _RESULT.validate_python({"kind": "tool_return", "result": value})
    return _RESULT.dump_python(result, mode="json")


def _undo(compensate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``compensate`` of what the tool returned; nothing to undo for a call that raised
    control flow (a retry prompt, a deferral)."""

    def undo(recorded: Any) -> Any:
        if isinstance(recorded, dict) and recorded.get("kind") in _RETURNED:
            return compensate(unwrap_tool_call_result(_RESULT.validate_python(recorded)))
        return None

    return undo


def _body(name: str) -> Callable[..., Any]:
    """The durable tool's function: the pydantic-ai tool call, its result (or the
    control flow it raised: a retry prompt, a deferral) recorded as data."""

    async def call_tool(**tool_args: Any) -> Any:
        toolset, ctx, tool = _calling.get()
        result = await wrap_tool_call_result(toolset.call_tool(name, tool_args, ctx, tool))
        return _RESULT.dump_python(result, mode="json")

    call_tool.__qualname__ = f"pydantic_ai_tool.{name}"
    return call_tool


@dataclass
class DurableToolset(WrapperToolset[Any]):
    """A toolset whose tool calls, inside a run, are durable calls (``calls``)."""

    calls: ToolCalls | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: ToolContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if current() is None or self.calls is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        token = _calling.set((self.wrapped, ctx, tool))
        try:
            value = await self.calls.durable(name)(**tool_args)
        finally:
            _calling.reset(token)
        return unwrap_tool_call_result(_RESULT.validate_python(value))
