"""A pydantic-ai ``Agent`` made durable on an agentlog run (``agentlog[pydantic-ai]``).

:class:`DurableAgent` wraps an agent the way pydantic-ai's own durable integrations
(Temporal, DBOS, Prefect) do: its model is wrapped so that each model request is a
recorded decision (``llm_decided``, with the response's usage), and its toolsets so that
each tool call is a durable tool call of the engine, with its policies; the tools named in
``side_effects`` get an intent and an idempotency key. Inside a run (an ``@engine.agent``)
a replay returns the recorded responses and tool results without calling the model or the
tools again; outside one, it is the plain pydantic-ai agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Literal

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.models import Model
from pydantic_ai.output import OutputDataT
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import AgentDepsT

from ..errors import UsageError
from ..policy.failure import CircuitBreaker, Classifier, RetryPolicy
from ..runtime.declare.wrappers import ToolOptions
from ..runtime.run.context import current
from ._pai_model import DurableModel, conversation_digest, recorded_response, restored_response
from ._pai_tools import TOOL_OPTIONS, DurableToolset, ToolCalls, check_options

if TYPE_CHECKING:
    from ..runtime.engine import Engine

__all__ = [
    "DurableAgent",
    "DurableModel",
    "DurableToolset",
    "conversation_digest",
    "recorded_response",
    "restored_response",
]

# The policy options run.decide takes for a model request.
_MODEL_OPTIONS = frozenset({"retry", "timeout", "breaker", "classify"})


class DurableAgent(WrapperAgent[AgentDepsT, OutputDataT]):
    """``agent`` made durable on ``engine``'s runs.

    Inside an ``@engine.agent``, ``run``, ``run_sync``, ``run_stream`` and ``iter`` record
    every model request as a decision named ``{name}.model`` (``model_options``: its
    ``retry``/``timeout``/``breaker``/``classify``; a streamed request takes ``retry`` and
    ``classify``, and is retried if it fails before its first chunk; its response's
    secret-named entries are the model's, not redacted) and make every tool call a durable call
    of the tool ``{name}.{tool}`` (``retry``, ``timeout``, ``breaker``, ``classify`` for every
    tool; ``tools={"t": {...}}``: a tool's own ``@engine.tool`` options; ``side_effects``: the
    same, for tools that have effects, which get an intent and a key). Tool calls run one
    at a time inside a run, so their order is the same on replay. ``name`` (default: the
    agent's) is part of what the log records: keep it stable.
    """

    def __init__(
        self,
        agent: AbstractAgent[AgentDepsT, OutputDataT],
        engine: Engine,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | Literal["adaptive"] | None = None,
        breaker: CircuitBreaker | None = None,
        classify: Classifier | None = None,
        tools: Mapping[str, ToolOptions] | None = None,
        side_effects: Mapping[str, ToolOptions] | None = None,
        model_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(agent)
        self._durable_name = name or agent.name
        if not self._durable_name:
            raise UsageError("DurableAgent needs a name: Agent(name=...) or name=")
        if not isinstance(agent.model, Model):
            raise UsageError("DurableAgent needs an agent whose model is a Model instance")
        check_options("model_options", model_options or {}, _MODEL_OPTIONS)
        defaults = {"retry": retry, "timeout": timeout, "breaker": breaker, "classify": classify}
        per_tool: dict[str, dict[str, Any]] = {t: dict(o) for t, o in (tools or {}).items()}
        for tool, effect in (side_effects or {}).items():
            per_tool[tool] = {**per_tool.get(tool, {}), **effect, "side_effect": True}
        for tool, options in per_tool.items():
            check_options(f"the options of tool {tool!r}", options, TOOL_OPTIONS)
        given = {k: v for k, v in defaults.items() if v is not None}
        self._calls = ToolCalls(engine, self._durable_name, given, per_tool)
        self._model = DurableModel(agent.model, f"{self._durable_name}.model", model_options or {})
        self._toolsets = [DurableToolset(t, calls=self._calls) for t in agent.toolsets]
        for toolset in agent.toolsets:
            toolset.apply(self._calls.define)

    @property
    def name(self) -> str | None:
        return self._durable_name

    @name.setter
    def name(self, value: str | None) -> None:
        raise UsageError("a DurableAgent's name is recorded in the log: it cannot change")

    @property
    def model(self) -> Model:
        return self._model

    @contextmanager
    def override(self, **changes: Any) -> Iterator[None]:
        """As pydantic-ai's, except for the model and tools, which the log's decisions and
        calls stand for: a DurableAgent keeps those it wrapped."""
        fixed = sorted(k for k in ("model", "toolsets", "tools") if k in changes)
        if fixed:
            raise UsageError(
                f"a DurableAgent cannot override {', '.join(fixed)}: wrap an agent built "
                "with the ones you want"
            )
        with self.wrapped.override(**changes):
            yield

    @contextmanager
    def _durable(self, kwargs: Mapping[str, Any]) -> Iterator[None]:
        """Inside a run: the wrapped agent with the durable model and toolsets, its tool
        calls one at a time."""
        if kwargs.get("model") is not None:
            raise UsageError("inside a run, a DurableAgent's model cannot be replaced per call")
        if kwargs.get("toolsets"):
            raise UsageError("inside a run, a DurableAgent takes no extra toolsets per call")
        with (
            self.wrapped.override(model=self._model, toolsets=self._toolsets, tools=[]),
            ToolManager.parallel_execution_mode("sequential"),
        ):
            yield

    @asynccontextmanager
    async def iter(self, *args: Any, **kwargs: Any) -> AsyncIterator[AgentRun[Any, Any]]:
        if current() is None:
            async with self.wrapped.iter(*args, **kwargs) as plain:
                yield plain
            return
        with self._durable(kwargs):
            async with self.wrapped.iter(*args, **kwargs) as durable:
                yield durable
