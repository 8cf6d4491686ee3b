"""Definitions registered by the decorators: tools and agents, plus argument handling.

A definition knows nothing of a store: the engine that runs an agent decides where the
run is recorded. Arguments are bound by signature, redacted before anything persists,
and compared on replay through a keyed hash of their real values.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol

import msgspec

from ... import codec
from ...errors import UsageError
from ...log.rpo import Rpo
from ...policy.budget import Budget
from ...policy.failure import CircuitBreaker, Classifier, RetryPolicy
from ...policy.recovery import Recovery
from ...policy.supervision import Supervisor
from ...secrets import WORDS, Seen, folded, redact, replay_key

DEFAULT_REDACT = WORDS  # CONTRACT's secret words, folded
_json = msgspec.json.Encoder(order="deterministic")
_packer = msgspec.msgpack.Encoder(enc_hook=codec.enc_hook)  # typed values: engine.codec

# An agent's parameters and result; an unparameterised ``AgentDef`` means any. Type
# parameter defaults (PEP 696) are for the type checker only: Python 3.11's typing
# does not take them, and the runtime needs no library for them.
if TYPE_CHECKING:
    from typing_extensions import ParamSpec, TypeVar

    P = ParamSpec("P", default=...)
    R = TypeVar("R", default=Any)
else:
    from typing import ParamSpec, TypeVar

    P = ParamSpec("P")
    R = TypeVar("R")


# What ``@engine.agent(resume=...)`` takes besides a predicate.
RESUME_MODES = ("auto", "approve")


def check_refresh(tool: str, seconds: object, side_effect: bool) -> None:
    """``refresh_after`` is seconds above zero, and only for a read: a side effect is
    never sent again because its result grew old."""
    if seconds is None:
        return
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if not number or not math.isfinite(float(seconds)) or float(seconds) <= 0:  # type: ignore[arg-type]
        raise UsageError(f"tool {tool}: refresh_after takes seconds above zero, not {seconds!r}")
    if side_effect:
        raise UsageError(f"tool {tool}: refresh_after is for reads; a side effect is never re-sent")


def args_hash(name: str, args: Any, key: bytes | None = None) -> str:
    """A keyed hash of a call's real arguments, stable across processes that share the
    replay ``key`` (default: this machine's, :func:`engine.secrets.replay_key`)."""
    try:
        blob = _json.encode([name, args])
    except (TypeError, msgspec.EncodeError):
        blob = repr([name, args]).encode()
    return hmac.new(key or replay_key(), blob, hashlib.sha256).hexdigest()[:32]


class Fence(int):
    """A lock's fencing token (``with run.lock(...) as fence``). A call's argument hash
    leaves it out, so a fork (or any run) holding the lock under a newer fence makes the
    same call as the holder it takes over from; the tool still receives the number."""


def hashed_args(bound: dict[str, Any], named: Any) -> Any:
    """What a call's argument hash covers: its ``named`` arguments, with every
    :class:`Fence` in ``bound`` (in dicts, lists, tuples) left out as a marker."""
    unfenced = _without_fences(bound)
    return named if unfenced is bound else normalize(unfenced, "arguments")


def _without_fences(value: Any) -> Any:
    """``value`` itself when it holds no fence; else a copy with markers for fences."""
    if isinstance(value, Fence):
        return "<fence>"
    if isinstance(value, dict):
        items = {k: _without_fences(v) for k, v in value.items()}
        same = all(items[k] is v for k, v in value.items())
        return value if same else items
    if isinstance(value, list | tuple):
        parts = [_without_fences(v) for v in value]
        return value if all(p is v for p, v in zip(parts, value, strict=True)) else parts
    return value


def normalize(value: Any, what: str) -> Any:
    """``value`` as the log will give it back (so live and replayed runs see the same)."""
    try:
        return msgspec.msgpack.decode(_packer.encode(value))
    except (TypeError, OverflowError, msgspec.EncodeError) as e:
        raise UsageError(f"{what} cannot be recorded: {e}") from None


@dataclass(eq=False)
class ToolDef:
    """A registered tool and its policy. Calling it inside a run makes a durable call."""

    fn: Callable[..., Any]
    name: str
    side_effect: bool = False
    key: Callable[..., object] | None = None
    verify: Callable[[str], Any] | None = None
    compensate: Callable[[Any], Any] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float | str | None = None
    breaker: CircuitBreaker | None = None
    fallback: Callable[..., Any] | None = None
    classify: Classifier | None = None
    redact: frozenset[str] = DEFAULT_REDACT
    takes_key: bool = False
    is_async: bool = False
    signature: inspect.Signature | None = None
    version: str = ""
    returns: Any = None  # the declared result type its durable calls give back
    decision: bool = False  # a decision's policies (runtime.decisions), not a tool
    # A read whose recorded result, older than this many seconds when the run continues
    # after a pause, is executed again (runtime.call.refresh); None: never.
    refresh_after: float | None = None

    def __post_init__(self) -> None:
        check_refresh(self.name, self.refresh_after, self.side_effect)
        self.redact = frozenset(folded(n) for n in self.redact)
        self.returns = codec.returns(self.fn)
        self.signature = inspect.signature(self.fn)
        self.version = code_version(self.fn)
        self.takes_key = "idempotency_key" in self.signature.parameters
        self.is_async = inspect.iscoroutinefunction(self.fn)
        fixed = self.timeout is not None and self.timeout != "adaptive"
        if fixed and (not isinstance(self.timeout, int | float) or self.timeout <= 0):
            raise UsageError(f"tool {self.name}: timeout must be seconds > 0 or 'adaptive'")

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by name (without ``idempotency_key``)."""
        assert self.signature is not None
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as e:
            raise UsageError(f"tool {self.name}: {e}") from None
        bound.apply_defaults()
        named = dict(bound.arguments)
        named.pop("idempotency_key", None)
        return named

    def redacted(self, value: Any, seen: Seen | None = None) -> Any:
        """``value`` (the arguments by name, or a normalised result) as persisted and
        logged: an entry whose name contains a word of ``redact`` (ignoring case, ``-``
        and ``_``) is replaced, at any depth (``headers={"X-API-Key": ...}`` too), and its
        value joins ``seen``, the run's secrets masked in messages."""
        return redact(value, self.redact, seen)


class ToolLookup(Protocol):
    """Where an agent's tools are found by name: the registry of the engine defining it."""

    def tool(self, name: str) -> ToolDef | None: ...


@dataclass(eq=False)
class AgentDef(Generic[P, R]):
    """A registered agent: ``fn(run, **input)``; found again by its import path, its tools
    in ``registry``. Called directly, it is ``fn`` (typed as ``fn`` is)."""

    fn: Callable[P, R]
    name: str  # module:qualname
    import_path: str  # module name, or the script's file for __main__
    snapshot_every: int = 100
    registry: ToolLookup | None = None  # the defining engine's tools
    is_async: bool = False
    version: str = ""
    supervise: Supervisor | None = None  # how it restarts its children that fail
    budget: Budget | None = None  # what its model calls may spend (engine.policy.budget)
    # After a crash: "auto" (recovery resumes it), "approve" (it waits for a person's
    # approve), or a predicate of its RunState, true when it must wait (lifecycle.approval).
    resume: str | Callable[[Any], object] = "auto"
    # How much recorded work a recovery may fold past the newest snapshot (engine.log.rpo).
    rpo: Rpo | None = None
    # Its ``version=`` (recorded per run as ``agent_started.version``; None: undeclared).
    release: str | None = None
    # Pure predicates of (RunState, results) checked after every step (lifecycle.invariants),
    # and how a failed step is recovered (lifecycle.recovery; None: it fails the run).
    invariants: tuple[Callable[..., object], ...] = ()
    recovery: Recovery | None = None

    def __post_init__(self) -> None:
        if self.release is not None and not (
            isinstance(self.release, str) and self.release.strip() and len(self.release) <= 64
        ):
            raise UsageError(
                f"agent {self.name}: version= takes a short non-empty string, not {self.release!r}"
            )
        if not callable(self.resume) and self.resume not in RESUME_MODES:
            raise UsageError(
                f"agent {self.name}: resume= takes 'auto', 'approve' or a predicate of the "
                f"run's state, not {self.resume!r}"
            )
        self.is_async = inspect.iscoroutinefunction(self.fn)
        self.version = code_version(self.fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def check_input(self, input: dict[str, Any]) -> None:
        """UsageError if ``input`` does not fit the agent's parameters (a missing or an
        unknown keyword): caught before the run is written, not as a failed run."""
        try:
            params = list(inspect.signature(self.fn).parameters.values())
            inspect.signature(self.fn).bind(None, **input)
        except TypeError as e:
            first = params[0].name if params else None
            if first is None or first in input:  # the run took the input's place
                raise UsageError(
                    f"agent {self.name}'s first parameter receives the run, so it cannot "
                    f"take input {first!r} too: define it as def {self.fn.__name__}(run, ...)"
                    if first
                    else f"agent {self.name} takes no parameter: its first receives the run"
                ) from None
            raise UsageError(f"input does not fit agent {self.name}: {e}") from None
        except ValueError:  # no signature to check (a builtin): the call decides
            pass


def code_version(fn: Callable[..., Any]) -> str:
    """A short hash of a function's source (its bytecode when the source is unavailable)."""
    try:
        text = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = code.co_code if code is not None else repr(fn).encode()
    return hashlib.sha256(text).hexdigest()[:12]


def qualified(fn: Callable[..., Any]) -> tuple[str, str]:
    """``(module:qualname, import path)``; a script run as __main__ records its file."""
    module = getattr(fn, "__module__", None) or "__main__"
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", "agent"))
    path = module
    if module == "__main__":
        module, path = main_module_path(sys.modules.get("__main__"))
    elif module.startswith("__agentlog_script_"):  # a script registry._load_script loaded
        path = os.path.abspath(getattr(sys.modules.get(module), "__file__", "") or "")
        module = "__main__"
    return f"{module}:{qualname}", path


def main_module_path(main: object) -> tuple[str, str]:
    """The module name and import path a run started from ``__main__`` (``main``)
    records: its name when run with ``python -m`` (importable by it), else the script's
    file."""
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return spec.name, spec.name
    return "__main__", os.path.abspath(getattr(main, "__file__", "") or "")
