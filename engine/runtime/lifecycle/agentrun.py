"""The ``run`` an agent receives: the run context's durable calls, and those of many
agents (child runs, cross-agent locks, messages, timers), each in a module of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ... import codec
from ...policy import budget
from ..children import spawn as children
from ..defs.definitions import AgentDef
from ..model import decisions, streams
from ..run import patches
from ..run.context import current
from ..waits import locks, mailbox, timers
from . import invariants
from .watched import Watched


class AgentRun(Watched):
    """What an agent's ``run`` parameter is: see :class:`RunContext` for decisions,
    steps, checkpoints and questions; below, the calls that reach other runs."""

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """A named stretch of work (``step_started``, ``step_completed``); after it, the
        agent's invariants are checked against the log (``InvariantViolated``)."""
        call = self._calls + 1  # the step's own call, taken as it opens
        with super().step(name):
            yield
        invariants.check(self, call, name)

    def finish_check(self) -> None:
        """Code returned: every recorded call was reached, and the invariants hold."""
        super().finish_check()
        invariants.check_end(self)

    def decide(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` (a model) once and record its value and usage; a
        replay returns the recorded value, as the type ``fn`` declares. ``retry=``,
        ``timeout=``, ``breaker=`` and ``classify=`` are the call's policies, as a
        tool's (not passed to ``fn``); an async ``fn``'s decision is awaited."""
        policies, kwargs = decisions.split(kwargs)
        model = decisions.define(name, fn, policies, codec.returns(fn))
        return decisions.decide(self, model, args, kwargs)

    def now(self) -> float:
        """The engine's wall clock (epoch seconds) read once and recorded: a resume, a
        replay or a verify gets the same value. Agent code reads the time here, never
        from ``time.time()``. Not awaited, in an async agent too."""
        return decisions.now(self)

    def usage(self, tokens_in: int, tokens_out: int, cost: float | None = None) -> None:
        """Report a model call's usage: inside a decision's function, recorded with the
        decision; in agent code, recorded as a call of its own. Counted in the budget."""
        used = budget.usage(tokens_in, tokens_out, cost)
        if current() is not self:  # inside a decision's (or a stream's) function
            self.add_usage(used)
        else:
            decisions.usage_call(self, used)

    def spawn(self, agent: AgentDef[..., Any] | Callable[..., Any], /, **input: Any) -> Any:
        """Start ``agent`` with ``input`` as a child run of this one (durable: a replay
        returns the same child and starts nothing). Returns its handle."""
        return children.spawn(self, agent, input)

    def call(self, agent: AgentDef[..., Any] | Callable[..., Any], /, **input: Any) -> Any:
        """Spawn a child run and wait for its output (``ChildFailed`` if it fails)."""
        return children.spawn(self, agent, input).result()

    def gather(self, *spawned: children.Child) -> list[Any]:
        """Wait for several children; their outputs in the order given."""
        return children.gather(self, spawned)

    def lock(self, name: str, ttl: float = 30.0) -> contextlib.AbstractContextManager[int]:
        """Hold the cross-agent lock ``name`` for the block; its fencing token (an int,
        strictly increasing per name) is the block's value."""
        return locks.lock(self, name, ttl)

    def send(self, to: str, topic: str, value: Any = None) -> None:
        """Send ``value`` on ``topic`` to the run ``to`` (durable; delivered once)."""
        mailbox.send(self, to, topic, value)

    def recv(self, topic: str, timeout: float | None = None) -> Any:
        """The next message on ``topic`` sent to this run (consumed once); None when
        ``timeout`` seconds pass first. Waits durably (in an async agent,
        ``await run.recv(...)``)."""
        return mailbox.recv(self, topic, timeout)

    def stream(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        assemble: Callable[[list[Any]], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """The chunks of the model call ``fn(*args, **kwargs)`` as they come (``for`` a
        generator, ``async for`` an async generator); the assembled value (text joined,
        or ``assemble(chunks)``) is recorded, and a replay yields it as one chunk.
        ``retry=`` and ``classify=`` retry a stream that fails before its first chunk."""
        return streams.stream(self, name, fn, args, kwargs, assemble)

    def sleep(self, seconds: float) -> Any:
        """Wait ``seconds`` durably: a crash or restart sleeps only what remains (in an
        async agent, ``await run.sleep(...)``)."""
        return timers.sleep(self, seconds)

    def patched(self, name: str) -> bool:
        """True where the run takes the patch ``name`` (live, with this code: a marker is
        recorded); False replaying a run whose log passed this point without it, so runs
        recorded before the change keep their old path."""
        return patches.patched(self, name)

    def deprecate_patch(self, name: str) -> None:
        """The patch ``name`` is in every run now: runs with its marker and without it
        both replay, and nothing is recorded."""
        patches.deprecate(self, name)
