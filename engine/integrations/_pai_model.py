"""pydantic-ai model requests as recorded decisions (engine.integrations.pydantic_ai).

A response is recorded as pydantic-ai's own JSON text of it (``response_json``: the
engine's redaction of secret-named entries does not reach inside a text, so the model's
tool-call arguments and typed outputs come back as the model gave them, ``session_id``
included), with its usage and cost where the engine reads a decision's spending
(``usage``), and validated back into an equal ``ModelResponse``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext as ToolContext

from ..runtime.lifecycle.agentrun import AgentRun
from ..runtime.model import streams
from ..runtime.run.context import RunContext, current

__all__ = [
    "DurableModel",
    "conversation_digest",
    "recorded_response",
    "restored_response",
]

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
# What of a message the model sees and a replay reproduces (timestamps and pydantic-ai's
# run ids differ from one execution to the next and are left out of the comparison).
_COMPARED = ("part_kind", "content", "tool_name", "args", "tool_call_id")


# The policies run.stream takes (a stream has no timeout or breaker of its own).
_STREAM_OPTIONS = ("retry", "classify")


def recorded_response(response: ModelResponse) -> dict[str, Any]:
    """``response`` as a decision records it: pydantic-ai's JSON text of it (priced, if
    it has no cost, as pydantic-ai prices it), and its usage and cost where the engine
    reads a decision's spending."""
    response = _priced(response)
    usage: dict[str, Any] = {
        "input_tokens": response.usage.input_tokens,
        "output_tokens": response.usage.output_tokens,
    }
    if response.usage.cost is not None:
        usage["cost"] = float(response.usage.cost)
    text = _RESPONSE.dump_json(response).decode()
    return {"response_json": text, "usage": usage}


def restored_response(value: Mapping[str, Any]) -> ModelResponse:
    """The :class:`ModelResponse` a recorded decision holds (equal to the one recorded)."""
    return _RESPONSE.validate_json(value["response_json"])


def _priced(response: ModelResponse) -> ModelResponse:
    """``response`` with the cost pydantic-ai's agent would give it after the request
    (genai-prices' table, bundled: offline), so that the engine counts it and a replay
    restores it; unchanged if it has a cost, or if its model has no known price."""
    if response.usage.cost is not None or not response.model_name:
        return response
    try:
        price = response.cost().total_price
    except Exception:  # unknown model or provider, usage it cannot price: no cost
        return response
    usage = copy.copy(response.usage)
    usage.cost = price
    return dataclasses.replace(response, usage=usage)


def conversation_digest(messages: Sequence[ModelMessage]) -> str:
    """What the model was asked, as the decision's argument: a replay that sends it
    something else at the same turn diverges instead of reusing an unrelated answer."""
    dumped = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    kept = [[{k: p[k] for k in _COMPARED if k in p} for p in m["parts"]] for m in dumped]
    blob = json.dumps(kept, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


class DurableModel(WrapperModel):
    """A model whose requests, inside a run, are decisions named ``decision`` (policies:
    ``options``, as ``run.decide`` takes them); outside a run, the wrapped model's."""

    def __init__(self, wrapped: Model, decision: str, options: Mapping[str, Any]) -> None:
        super().__init__(wrapped)
        self.decision = decision
        self.options = dict(options)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        run = current()
        if run is None:
            return await super().request(messages, model_settings, model_request_parameters)

        async def model_request(conversation: str) -> dict[str, Any]:
            response = await self.wrapped.request(
                messages, model_settings, model_request_parameters
            )
            return recorded_response(response)

        return await self._decide(run, model_request, messages)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Inside a run, a stream the log has not recorded reaches pydantic-ai live, and
        the response it made of it is recorded when it is done with it (``run.stream``,
        with the ``retry`` and ``classify`` options: one that fails before its first
        chunk is retried); a replay gives the recorded response back as a completed
        stream."""
        run = current()
        if run is None:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                yield streamed
            return
        opened = self._opener(messages, model_settings, model_request_parameters, run_context)
        digest = conversation_digest(messages)
        policies = {k: v for k, v in self.options.items() if k in _STREAM_OPTIONS}
        chunks = streams.stream(run, self.decision, opened, (digest,), policies, _streamed_response)
        assert isinstance(chunks, AsyncGenerator)
        first = await anext(chunks)
        if isinstance(first, StreamedResponse):
            try:
                yield first
            except BaseException:
                await _abandon(chunks)  # nothing recorded: resumed, the model is asked again
                raise
        else:
            yield CompletedStreamedResponse(
                restored_response(first), model_request_parameters=model_request_parameters
            )
        async for _ in chunks:  # the end of the stream: its response is recorded
            pass

    def _opener(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None,
    ) -> Callable[[str], AsyncIterator[Any]]:
        """The stream's two chunks: the wrapped model's stream (which pydantic-ai reads
        outside this generator), then, once it is done with it, the response as recorded."""

        async def model_stream(conversation: str) -> AsyncIterator[Any]:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                yield streamed
                yield recorded_response(streamed.get())

        return model_stream

    async def _decide(
        self,
        run: RunContext,
        fn: Callable[[str], Any],
        messages: Sequence[ModelMessage],
    ) -> ModelResponse:
        assert isinstance(run, AgentRun)  # the run an agent receives
        value = await run.decide(self.decision, fn, conversation_digest(messages), **self.options)
        return restored_response(value)


def _streamed_response(chunks: list[Any]) -> Any:
    """A stream's recorded value: the response pydantic-ai made of it (of what it had read,
    if it stopped reading early)."""
    last = chunks[-1]
    return last if isinstance(last, dict) else recorded_response(last.get())


class _Abandoned(Exception):
    """Thrown into a model stream whose reader failed: the stream ends, unrecorded."""


async def _abandon(chunks: AsyncGenerator[Any]) -> None:
    with contextlib.suppress(_Abandoned, StopAsyncIteration):
        await chunks.athrow(_Abandoned())
