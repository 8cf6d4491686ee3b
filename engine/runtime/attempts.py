"""Running one tool call under its policy: breaker, timeout, retries with jitter, budgets.

Every attempt is recorded: a failed one as ``tool_failed`` with its evidence (redacted
arguments, error, raw response, code versions) and, when it will be retried,
``retry_scheduled`` with the chosen delay. An exhausted budget or an open circuit fails
the call fast, naming the cause; an open circuit with a ``fallback`` takes the degraded
path, recorded as such.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from .. import events as ev
from .. import failpoints
from ..errors import RunInterrupt, UsageError
from ..policy import classify, describe, describe_failure, error_for, http_status
from ..secrets import Seen, redact
from ..store import Append, Store, stream_id
from . import ledger
from .context import detached, detached_async
from .defs import normalize
from .outcomes import Call, record, succeed

RESPONSE_LIMIT = 2048


def run(c: Call, uncertain: Callable[[Call, str], Any]) -> Any:
    """Attempt the call until it succeeds, fails for good, or its outcome is uncertain."""
    tool, policy, guards = c.tool, c.tool.retry, c.ctx.guards
    first = guards.clock()
    while True:
        if tool.breaker is not None:
            allowed, change = guards.breaker(tool.name, tool.breaker).allow()
            _circuit(c, change)
            if not allowed:
                if tool.fallback is not None:
                    value = detached(tool.fallback, *c.args, **c.kwargs)
                    return succeed(c, value, source="fallback")
                _final(c, "transient", f"circuit open for tool {tool.name}; failing fast")
        c.attempts += 1
        started = guards.clock()
        try:
            result = _invoke(c)
        except RunInterrupt:
            raise
        except Exception as exc:
            kind = classify(exc, side_effect=tool.side_effect, hook=tool.classify)
            duration = guards.clock() - started
            if tool.breaker is not None:
                breaker = guards.breaker(tool.name, tool.breaker)
                if kind in ("transient", "indeterminate"):
                    _circuit(c, breaker.failure())
                else:  # the tool answered; its health is unknown, not bad
                    breaker.release()
            failed = _failed(c, exc, kind, duration)
            more = c.attempts < policy.max_attempts and (
                policy.max_elapsed is None or guards.clock() - first < policy.max_elapsed
            )
            if kind == "indeterminate" and tool.side_effect:
                c.maybe_landed = True
                resends = tool.verify is not None or tool.takes_key
                if not resends:  # only a person can tell: never re-sent blind
                    record(c, failed)
                    exhausted = "" if more else " (attempts exhausted)"
                    return uncertain(c, failed.message + exhausted)
                stop = _budget_exhausted(c) if more else None
                if more and stop is None:
                    # Verify, or re-send under the same key, after a backoff like any
                    # retry: budgets apply, so re-sends cannot storm a struggling service.
                    _schedule_retry(c, failed, kind)
                    return uncertain(c, failed.message)
                # Attempts (or a retry budget) exhausted for a tool whose uncertainty
                # re-sends itself (verifier or idempotency key): verify once more, else
                # fail for good instead of re-sending forever. A resume re-attempts the
                # call under the same key.
                assert c.key is not None
                found = detached(tool.verify, c.key) if tool.verify is not None else None
                if found is not None:
                    record(c, failed)
                    return succeed(c, found, source="verified")
                why = f"; {stop}" if stop else " (attempts exhausted)"
                _final(c, kind, failed.message + why, failed, cause=exc)
            if kind == "transient" and more:
                budget = _budget_exhausted(c)
                if budget is not None:
                    _final(c, kind, f"{failed.message}; {budget}", failed)
                _schedule_retry(c, failed, kind)
                continue
            _final(c, kind, failed.message, failed, cause=exc)
        duration = guards.clock() - started
        if tool.breaker is not None:
            _circuit(c, guards.breaker(tool.name, tool.breaker).success())
        guards.latency(tool.name)[0].add(duration)
        failpoints.hit("after_tool")
        return succeed(c, result, source="executed", duration=duration)


def _schedule_retry(c: Call, failed: ev.ToolFailed, kind: str) -> None:
    """Record the failed attempt and the next one's jittered delay, then wait it out."""
    guards = c.ctx.guards
    delay = c.tool.retry.delay(c.attempts, guards.rng)
    retry = ev.RetryScheduled(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        attempt=c.attempts + 1,
        delay=delay,
        kind=kind,
    )
    record(c, failed, retry)
    c.ctx.log.info("tool_retry", call=c.number, tool=c.tool.name, delay=delay)
    guards.sleep(delay)


def _failed(c: Call, exc: BaseException, kind: str, duration: float) -> ev.ToolFailed:
    seen = c.ctx.seen
    reply = _reply(exc, c.tool.redact, seen)  # first: its secret headers join ``seen``
    evidence: dict[str, Any] = {"args": c.shown, "tool_version": c.tool.version}
    evidence["agent_version"] = c.ctx.agent.version
    evidence.update(reply)
    return ev.ToolFailed(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        kind=kind,
        message=seen.mask(describe_failure(exc)),
        error_type=type(exc).__name__,
        attempt=c.attempts,
        final=False,
        duration=duration,
        evidence=seen.mask_all(evidence),
    )


def _reply(exc: BaseException, words: frozenset[str], seen: Seen) -> dict[str, Any]:
    """What the server answered, as far as the exception tells: its HTTP ``status``, its
    ``headers`` (secret ones redacted) and its body as ``response`` (a client library's
    response body already read, or a raw ``response``/``body`` text). A response object
    is never stored whole: its repr may hold anything."""
    out: dict[str, Any] = {}
    status = http_status(exc)
    if status is not None and 100 <= status <= 599:
        out["status"] = status
    try:  # best effort: a library's property may raise
        raw = getattr(exc, "response", None)
        if raw is None:  # not `or`: a requests Response with an error status is falsy
            raw = getattr(exc, "body", None)
        if raw is not None and not isinstance(raw, str | bytes | bytearray):
            headers = _headers(raw, words, seen)
            if headers:
                out["headers"] = headers
            # An httpx or requests Response: the body it already read (reading more
            # here could block on the network).
            raw = _read_body(raw)
        if raw is not None:
            text = _truncated(raw)
            _secrets_in_body(text, words, seen)
            out["response"] = text
    except Exception:
        pass
    return out


def _headers(response: object, words: frozenset[str], seen: Seen) -> dict[str, str]:
    """A response object's headers as text, those with secret names redacted."""
    headers = getattr(response, "headers", None)
    items = getattr(headers, "items", None)
    if not callable(items):
        return {}
    shown = {str(k): str(v) for k, v in items()}
    return dict(redact(shown, words, seen))


def _read_body(response: object) -> str | bytes | None:
    """The body a response object holds already (httpx and requests keep it in
    ``_content``), never read from the network."""
    held = getattr(response, "__dict__", {})
    for name in ("_content", "content", "text", "body"):
        value = held.get(name)
        if isinstance(value, str | bytes):
            return value
    return None


def _secrets_in_body(text: str, words: frozenset[str], seen: Seen) -> None:
    """A JSON body's secret-named values join ``seen`` (so the body is masked as sent)."""
    with contextlib.suppress(msgspec.DecodeError, RecursionError):
        redact(msgspec.json.decode(text), words, seen)


def _truncated(raw: object) -> str:
    """The raw response as text, cut to RESPONSE_LIMIT bytes of UTF-8 (whole characters)."""
    if isinstance(raw, bytes | bytearray):
        text = bytes(raw[: RESPONSE_LIMIT * 4]).decode("utf-8", errors="replace")
    else:
        text = raw if isinstance(raw, str) else repr(raw)
    data = text.encode("utf-8", errors="replace")
    if len(data) <= RESPONSE_LIMIT:
        return text
    return data[:RESPONSE_LIMIT].decode("utf-8", errors="ignore")


def _final(
    c: Call,
    kind: str,
    message: str,
    failed: ev.ToolFailed | None = None,
    cause: BaseException | None = None,
) -> None:
    """Record the call's final failure (releasing a business key unless the effect may
    have happened) and raise it."""
    final = ev.ToolFailed(
        at=ev.now(),
        call=c.number,
        tool=c.tool.name,
        kind=kind,
        message=message,
        error_type=failed.error_type if failed else "",
        attempt=max(c.attempts, 1),
        final=True,
        duration=failed.duration if failed else 0.0,
        evidence=failed.evidence if failed else {},
    )
    extra: list[Append] = []
    # An indeterminate failure keeps its key claimed: the effect may have landed.
    if c.business and c.claim_version and kind != "indeterminate" and not c.maybe_landed:
        assert c.key is not None
        state = ledger.KeyState(c.claim_version, None, None)
        extra.append(ledger.release_event(state, c.key, c.run_id, c.number, kind))
    record(c, final, extra=extra)
    c.ctx.failed_call = c.number
    c.ctx.log.info("tool_failed", call=c.number, tool=c.tool.name, kind=kind, key=c.key)
    raise error_for(kind, f"{c.tool.name}: {message}") from cause


def _budget_exhausted(c: Call) -> str | None:
    guards = c.ctx.guards
    if c.ctx.writer.state.retries >= guards.run_retry_budget:
        return f"the run's retry budget ({guards.run_retry_budget} retries) is exhausted"
    if not guards.bucket(c.tool.name).take():
        return f"the global retry budget of tool {c.tool.name} is exhausted"
    return None


def _circuit(c: Call, change: str | None) -> None:
    """Record a breaker transition in the tool's own stream."""
    if change is None:
        return
    event: ev.Event
    if change == "open":
        assert c.tool.breaker is not None
        failures = c.ctx.guards.breaker(c.tool.name, c.tool.breaker).failures
        event = ev.CircuitOpened(at=ev.now(), tool=c.tool.name, failures=failures)
    elif change == "half_open":
        event = ev.CircuitHalfOpened(at=ev.now(), tool=c.tool.name)
    else:
        event = ev.CircuitClosed(at=ev.now(), tool=c.tool.name)
    tool_stream_append(c.ctx.store, c.tool.name, event)
    c.ctx.log.warning("circuit_" + change, tool=c.tool.name)


def timeout_of(c: Call) -> float | None:
    timeout = c.tool.timeout
    if timeout == "adaptive":
        latency, fresh = c.ctx.guards.latency(c.tool.name)
        if fresh:  # seed from this run's recorded durations of the tool
            for call in c.ctx.journal.calls.values():
                out = call.outcome
                if isinstance(out, ev.ToolSucceeded) and out.tool == c.tool.name:
                    latency.add(out.duration)
        return latency.timeout()
    return float(timeout) if isinstance(timeout, int | float) else None


def _invoke(c: Call) -> Any:
    kwargs = dict(c.kwargs)
    if c.tool.takes_key:
        kwargs["idempotency_key"] = c.key
    seconds = timeout_of(c)
    future: concurrent.futures.Future[Any]
    if c.tool.is_async:
        if c.loop is None:  # an async tool in a sync agent: its own loop, same timeout
            return asyncio.run(_bounded(detached_async(c.tool.fn(*c.args, **kwargs)), seconds))
        coro = detached_async(c.tool.fn(*c.args, **kwargs))
        future = asyncio.run_coroutine_threadsafe(coro, c.loop)
    elif seconds is None:
        return detached(c.tool.fn, *c.args, **kwargs)
    else:
        future = _in_daemon_thread(c.tool.fn, *c.args, **kwargs)
    try:
        return future.result(timeout=seconds)
    except concurrent.futures.CancelledError:
        # The agent's event loop cancelled the tool mid-flight (the run is ending): not a
        # failure to retry, since the request may have landed. Nothing is recorded; the
        # call stays uncertain, as after a crash, and resolves on resume.
        raise RunInterrupt(f"{c.tool.name} (call {c.number}) was cancelled") from None
    except concurrent.futures.TimeoutError as e:
        if future.done() and not future.cancelled() and future.exception() is e:
            # The tool's own TimeoutError (the same class as the futures one since 3.11),
            # not our deadline: classified like any exception the tool raises.
            raise
        if not future.cancel():
            _keep_late_result(c, future, time.monotonic())
        raise TimeoutError(f"no result within {seconds:.3g} s") from None


def _in_daemon_thread(
    fn: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> concurrent.futures.Future[Any]:
    """Call ``fn`` in a daemon thread of its own (outside any run). A tool abandoned past
    its timeout may never return: a pool's worker would keep the process from exiting
    (concurrent.futures joins its threads at exit), a daemon thread does not."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to the waiting caller, as a pool would
            future.set_exception(e)

    threading.Thread(target=work, name="agentlog-tool", daemon=True).start()
    return future


async def _bounded(coro: Any, seconds: float | None) -> Any:
    """Await ``coro`` for at most ``seconds``; past that it is cancelled (no late result)."""
    if seconds is None:
        return await coro
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise TimeoutError(f"no result within {seconds:.3g} s")
    return task.result()


def _keep_late_result(c: Call, future: concurrent.futures.Future[Any], since: float) -> None:
    """A sync tool abandoned in its thread: whatever it returns later is evidence only. It
    is recorded in the run while this execution still runs it; after that (the run ended,
    paused or failed) in the tool's own stream, naming the run and the call, never after
    the run's end."""

    def keep(f: concurrent.futures.Future[Any]) -> None:
        seen = c.ctx.seen
        error = None if f.exception() is None else describe(f.exception())  # type: ignore[arg-type]
        event = ev.ToolLateResult(
            at=ev.now(),
            call=c.number,
            tool=c.tool.name,
            result=None if error else c.tool.redacted(_plain(f.result()), seen),
            error=None if error is None else seen.mask(error),
            after=time.monotonic() - since,
        )
        try:
            if c.ctx.record_while_running(event):
                return
        except (Exception, RunInterrupt) as e:  # e.g. this owner lost the run's lease
            c.ctx.log.warning("late_result_not_recorded_in_run", call=c.number, error=str(e))
        elsewhere = msgspec.structs.replace(event, run_id=c.ctx.run_id)
        with c.ctx.kept_open() as still_open:
            if not still_open:  # its connections are gone: touching them can crash
                c.ctx.log.warning("late_result_dropped", call=c.number, tool=c.tool.name)
                return
            kept = tool_stream_append(c.ctx.store, c.tool.name, elsewhere)
        if kept:
            c.ctx.log.info("late_result_kept_in_tool_stream", call=c.number, tool=c.tool.name)
        else:  # evidence is best effort: the call's outcome was decided at its timeout
            c.ctx.log.warning("late_result_not_recorded", call=c.number, tool=c.tool.name)

    future.add_done_callback(keep)


def _plain(value: Any) -> Any:
    """A late result as builtins (one that cannot be encoded is named by its type only:
    its repr may hold anything)."""
    try:
        return normalize(value, "late result")
    except UsageError:
        return f"<{type(value).__name__}>"


def tool_stream_append(store: Store, tool: str, event: ev.Event) -> bool:
    """Append ``event`` to the tool's own stream (breaker transitions, late results);
    other processes write it too, so a conflict re-reads its end. False if it failed."""
    sid = stream_id("tool:" + tool)
    for _ in range(5):
        try:
            store.append([Append(sid, store.last_position(sid) + 1, event)])
            return True
        except Exception:  # a lost evidence record must not fail the call
            continue
    return False
