"""The event vocabulary: frozen, tagged msgspec Structs, one per fact in a run's life.

Tags are the snake_case names users see in timelines. Evolution follows msgspec's rules:
new fields get defaults and types never change. A change that a default cannot express
bumps the event's ``SCHEMA`` version and registers an upcaster (old dict -> new dict)
beside the event, so every log ever written stays readable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..kinds import Asked, Effects, FailureKind, Source
from .agents import *  # noqa: F403  (the events of many agents, by their __all__)
from .agents import AnyAgentEvent
from .base import Event as Event
from .base import Replayed as Replayed
from .base import event_data as event_data
from .base import now as now
from .deploys import *  # noqa: F403  (a patch's marker)
from .deploys import AnyDeployEvent
from .forks import *  # noqa: F403  (forks with edits and dry runs, by their __all__)
from .forks import AnyForkEvent
from .graphs import *  # noqa: F403  (a LangGraph thread's events, by their __all__)
from .graphs import AnyGraphEvent
from .ledger import *  # noqa: F403  (the ledger's events, by its __all__)
from .ledger import AnyLedgerEvent
from .recovery import *  # noqa: F403  (the events of graded recovery, by their __all__)
from .recovery import AnyRecoveryEvent
from .traces import TraceNoted as TraceNoted

# A closed field (a StrEnum of engine.kinds) encodes as its value and defaults to its
# member: msgspec leaves a default out by identity, so a value equal to it is left out
# whoever wrote it (a member passed for a plain-string default used to be kept); both
# payloads decode to the same event.

# --- run lifecycle ---------------------------------------------------------------------


class AgentStarted(Event, frozen=True, tag="agent_started"):
    agent: str  # module:qualname
    import_path: str  # module name, or a script's file path for __main__
    input: dict[str, Any] = {}
    parent_run_id: str | None = None
    fork_position: int | None = None
    code_version: str | None = None
    inherited: int = 0  # a fork's events copied from its parent: positions 2..inherited+1
    # A fork's treatment of its parent's side effects after the fork position: "reuse",
    # "compensate" or "resend" (None: not a fork, or a fork from before the choice).
    effects: Effects | None = None
    # engine.secrets.key_check of the replay key its arguments were hashed under (None: a
    # run from before the check, hashed under the legacy key). A fork keeps its parent's.
    key_check: str | None = None
    # A run a supervisor started in place of ``reuses`` (a child it abandoned to restart
    # it): it takes over that run's side effects that still stand when it makes the same
    # call, as a fork rewound with "reuse" does (None: not a restart's new run).
    reuses: str | None = None
    # The run's own id, written by every start (runs, children, restarts, forks): readers
    # match a stream to its run by it, checked against the stream the id derives. None
    # in logs written before it was kept (and in imports of those).
    run_id: str | None = None
    rpo_calls: int | None = None  # its agent's rpo= at the start: calls, or seconds (rpo_s)
    rpo_s: float | None = None
    version: str | None = None  # its agent's version= (None: undeclared, or an older log)


class AgentResumed(Event, frozen=True, tag="agent_resumed"):
    owner: str = ""
    reason: str = ""
    replayed: Replayed | None = None  # the tail past the newest snapshot it folded again
    recovery_s: float | None = None  # from the resume's start to its first commit


class RunQueued(Event, frozen=True, tag="run_queued"):
    """The run waits for a worker (``engine.enqueue``), in ``queue`` by ``priority``
    (higher first); runs of one ``partition`` share the queue's per-partition limit."""

    queue: str = "default"
    priority: int = 0
    partition: str | None = None


class RunDequeued(Event, frozen=True, tag="run_dequeued"):
    """A worker (``owner``) claimed the queued run and starts it."""

    owner: str = ""


class AgentFinished(Event, frozen=True, tag="agent_finished"):
    output: Any = None


class AgentFailed(Event, frozen=True, tag="agent_failed"):
    error: str
    kind: FailureKind = FailureKind.PERMANENT
    call: int | None = None
    evidence: dict[str, Any] = {}  # what it showed (a broken invariant: name, step, values)


class AgentAbandoned(Event, frozen=True, tag="agent_abandoned"):
    reason: str = ""


class RunImported(Event, frozen=True, tag="run_imported"):
    """The run above came from an export file: history to read, not code to run, until
    a person adopts it. ``chain`` is the file's last hash; ``signed`` whether an
    ``AGENTLOG_EXPORT_KEY`` signature on it was verified."""

    source: str = ""
    events: int = 0
    chain: str = ""
    signed: bool = False
    by: str = ""  # user@host that imported it


class RunAdopted(Event, frozen=True, tag="run_adopted"):
    """A person took an imported run on: from here it runs as ``agent`` (imported from
    ``import_path``), and may be resumed, answered, abandoned, rewound and recovered."""

    agent: str
    import_path: str
    by: str = ""  # user@host
    owner: str = ""  # the adopting engine's owner id (host:pid:nonce)


class RunHeld(Event, frozen=True, tag="run_held"):
    """Automatic recovery found the run crashed (running, its owner ``owner`` gone) and
    its agent resumes only on approval (``resume="approve"``, or its predicate said so):
    status ``held``; nothing resumes it until ``approve`` (or a person's ``resume``)."""

    reason: str = ""
    owner: str = ""  # the owner that died


class RunApproved(Event, frozen=True, tag="run_approved"):
    """A person let a held run continue: the resume that follows carries it on (status
    ``running``; a crash of that execution holds the run again)."""

    by: str = ""  # user@host
    via: str = "approve"  # the command that approved it: "approve" or "resume"


# --- the agent's own durable calls ------------------------------------------------------


class PlanCreated(Event, frozen=True, tag="plan_created"):
    call: int
    steps: list[str] = []


class StepStarted(Event, frozen=True, tag="step_started"):
    call: int
    name: str


class StepCompleted(Event, frozen=True, tag="step_completed"):
    call: int
    name: str
    duration: float = 0.0
    error: str | None = None


class LlmDecided(Event, frozen=True, tag="llm_decided"):
    """A decision's value (a model call's answer). ``attempt``: the attempt that gave it
    (earlier ones failed, each a ``tool_failed`` with ``decision``); ``tokens_in``,
    ``tokens_out`` and ``cost``: the usage it reported (engine.policy.budget)."""

    call: int
    name: str
    value: Any = None
    args_hash: str = ""
    duration: float = 0.0
    attempt: int = 1
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    answered_by: str | None = None  # the fallback that answered (None: the model itself)


class UsageRecorded(Event, frozen=True, tag="usage_recorded"):
    """``run.usage(...)`` called by agent code (outside any decision): a call of its own."""

    call: int
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None


class Checkpoint(Event, frozen=True, tag="checkpoint"):
    call: int
    name: str


class SavesTimed(Event, frozen=True, tag="saves_timed"):
    """How long the run's writer took to save since its last such record: ``checkpoints``
    in ``checkpoint_ms`` in all (each one's commit, plus its snapshot if one was taken),
    ``snapshots`` (at checkpoints and at the cadence) in ``snapshot_ms``. Measured after a
    commit, it rides at the front of a later one (engine.log.savetimes). A measurement, not
    a fact of the run: the fold and re-execution pass over it."""

    checkpoints: int = 0
    checkpoint_ms: float = 0.0
    snapshots: int = 0
    snapshot_ms: float = 0.0


class HumanInputRequested(Event, frozen=True, tag="human_input_requested"):
    call: int
    question: str
    reason: Asked = Asked.QUESTION  # "question" or "uncertain" (an effect nobody can verify)


class HumanInputProvided(Event, frozen=True, tag="human_input_provided"):
    call: int
    value: Any = None
    # A person confirmed an uncertain effect happened: ``value`` is the effect's result
    # (None for a bare "done"). A "done" word without it: a log from before results.
    confirmed: bool = False


# --- tools -----------------------------------------------------------------------------


class ToolInvoked(Event, frozen=True, tag="tool_invoked"):
    """The intent: written, and for a side effect committed, before the tool runs."""

    call: int
    tool: str
    args: dict[str, Any] = {}
    args_hash: str = ""
    key: str | None = None
    side_effect: bool = False
    parent_call: int | None = None  # a fork's call taking over its parent's effect at this call
    # The run whose call ``parent_call`` is, when a restart's new run took it over (None:
    # a fork's parent).
    parent_run: str | None = None
    # The key the request goes out under when it is not ``key``: a new ledger version of
    # a business key whose earlier effect was compensated (``ledger.sent_key``).
    sent_key: str | None = None


class ToolSucceeded(Event, frozen=True, tag="tool_succeeded"):
    call: int
    tool: str
    result: Any = None
    attempt: int = 1
    duration: float = 0.0
    # "executed", "verified", "ledger", "fallback", "human", "parent" (a fork reusing the
    # outcome of the same call its parent made)
    source: Source = Source.EXECUTED


class ToolFailed(Event, frozen=True, tag="tool_failed"):
    call: int
    tool: str
    kind: FailureKind  # transient / permanent / indeterminate / logical
    message: str
    error_type: str = ""
    attempt: int = 1
    final: bool = True
    duration: float = 0.0
    evidence: dict[str, Any] = {}
    # A decision's attempt (``run.decide`` under its policies), named by ``tool``: not a
    # tool call; ``args_hash`` identifies the decision's arguments for replay.
    decision: bool = False
    args_hash: str = ""
    # The effect happened but its result could not be recorded (too large, too deep): the
    # failure settles the call, and a resume of the failed run does not send it again.
    landed: bool = False


class ToolLateResult(Event, frozen=True, tag="tool_late_result"):
    """Evidence: a tool abandoned at its timeout finished later. Never returned to code.
    In a tool's own stream (the run had ended) ``run_id`` names the run of ``call``."""

    call: int
    tool: str
    result: Any = None
    error: str | None = None
    after: float = 0.0
    run_id: str | None = None


class RetryScheduled(Event, frozen=True, tag="retry_scheduled"):
    call: int
    tool: str
    attempt: int  # the attempt that will run next
    delay: float
    kind: FailureKind = FailureKind.TRANSIENT
    decision: bool = False  # a decision's retry, not a tool's


class CompensationStarted(Event, frozen=True, tag="compensation_started"):
    call: int
    tool: str
    key: str | None = None


class Compensated(Event, frozen=True, tag="compensated"):
    call: int
    tool: str
    result: Any = None
    error: str | None = None


class CircuitOpened(Event, frozen=True, tag="circuit_opened"):
    tool: str
    failures: int = 0


class CircuitHalfOpened(Event, frozen=True, tag="circuit_half_opened"):
    tool: str


class CircuitClosed(Event, frozen=True, tag="circuit_closed"):
    tool: str


AnyEvent = (
    AgentStarted
    | AgentResumed
    | RunQueued
    | RunDequeued
    | AgentFinished
    | AgentFailed
    | AgentAbandoned
    | RunImported
    | RunAdopted
    | RunHeld
    | RunApproved
    | TraceNoted
    | PlanCreated
    | StepStarted
    | StepCompleted
    | LlmDecided
    | UsageRecorded
    | Checkpoint
    | SavesTimed
    | HumanInputRequested
    | HumanInputProvided
    | ToolInvoked
    | ToolSucceeded
    | ToolFailed
    | RetryScheduled
    | ToolLateResult
    | CompensationStarted
    | Compensated
    | CircuitOpened
    | CircuitHalfOpened
    | CircuitClosed
    | AnyLedgerEvent
    | AnyAgentEvent
    | AnyDeployEvent
    | AnyForkEvent
    | AnyGraphEvent
    | AnyRecoveryEvent
)

EVENT_TYPES: dict[str, type[Event]] = {t.__struct_config__.tag: t for t in AnyEvent.__args__}

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
# (tag, from_version) -> upcaster producing the dict of version from_version + 1
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def upcaster(tag: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register ``fn`` to lift the stored dict of ``tag`` from one schema version."""

    def register(fn: Upcaster) -> Upcaster:
        UPCASTERS[(tag, from_version)] = fn
        return fn

    return register


class Positioned(Protocol):
    """A run's event with its position: a record read, or an append about to be written.
    Every typed reader folds these."""

    @property
    def position(self) -> int: ...
    @property
    def event(self) -> Event: ...


def event_type(tag: str) -> type[Event]:
    return EVENT_TYPES[tag]
