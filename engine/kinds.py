"""The closed vocabularies of the log: run statuses (and the named sets of them every
reader uses), failure kinds, outcome sources, rewind modes, why a run asks or waits,
what a timer is for, and a circuit breaker's states.

Each is a ``StrEnum``: a member *is* its stored string (``RunStatus.COMPLETED ==
"completed"``), so events, snapshots and exports keep plain strings and logs written
before these types existed read the same.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run stands (``RunState.status``)."""

    NEW = "new"  # nothing recorded yet
    QUEUED = "queued"  # recorded, waiting for a worker to claim it (engine.enqueue)
    RUNNING = "running"
    PAUSED = "paused"  # waiting for a person's answer (its own, or a child's)
    WAITING = "waiting"  # holding no thread until a timer, a message or a child is due
    HELD = "held"  # crashed, its agent resumes on approval: waits for `agentlog approve`
    COMPLETED = "completed"
    FAILED = "failed"  # resumable: resume re-attempts the failed call
    ABANDONED = "abandoned"
    DRY_RUN = "dry_run"  # a dry-run fork ended: it sent nothing (engine.rewind(dry_run=True))


# The status sets, named once (a plain stored string matches too). Every status is in
# exactly one of LIVE, SUSPENDED and SETTLED; FINAL is the part of SETTLED nothing reopens.
# Completed, abandoned or a dry run's end: nothing more runs in it, ever.
FINAL = frozenset({RunStatus.COMPLETED, RunStatus.ABANDONED, RunStatus.DRY_RUN})
# Completed or a dry run's end: the run returned an output (a dry run stopped at a
# would-be effect has none: its ``error`` says where it stopped).
RETURNED = frozenset({RunStatus.COMPLETED, RunStatus.DRY_RUN})
# Final or failed: no execution is left that may write to it (resume starts a new one).
SETTLED = FINAL | {RunStatus.FAILED}
# What a prune takes unless told otherwise: every settled status, in a stable order.
PRUNABLE = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABANDONED)
# Paused, waiting or held: it holds no thread until an answer, a timer, a message, a child
# or (held) a person's approval.
SUSPENDED = frozenset({RunStatus.PAUSED, RunStatus.WAITING, RunStatus.HELD})
# Paused or held: the part of SUSPENDED that waits for a person (an answer, an approval).
ASKING = frozenset({RunStatus.PAUSED, RunStatus.HELD})
# New, queued or running: an execution has it (or is about to: a worker claims it).
LIVE = frozenset({RunStatus.NEW, RunStatus.QUEUED, RunStatus.RUNNING})


# The decision name ``run.now()`` records its readings under (a timeline shows it as a clock).
NOW = "run.now"


class FailureKind(StrEnum):
    """How a failure is handled (``tool_failed.kind``, ``agent_failed.kind``)."""

    TRANSIENT = "transient"  # retry with backoff
    PERMANENT = "permanent"  # fail the call
    INDETERMINATE = "indeterminate"  # a side effect may have happened: resolve, never resend blind
    LOGICAL = "logical"  # the output is invalid: re-plan, never retry
    UNDO_UNKNOWN = "undo_unknown"  # abandon stopped at an effect nobody can tell the state of


TOOL_KINDS = (
    FailureKind.TRANSIENT,
    FailureKind.PERMANENT,
    FailureKind.INDETERMINATE,
    FailureKind.LOGICAL,
)


class Source(StrEnum):
    """Where a call's recorded outcome came from (``tool_succeeded.source``)."""

    EXECUTED = "executed"  # the tool ran and returned it
    LEDGER = "ledger"  # another run's effect under the same business key
    VERIFIED = "verified"  # the tool's verifier found the effect
    HUMAN = "human"  # a person said the effect happened
    FALLBACK = "fallback"  # the circuit was open: the degraded path, not the effect
    PARENT = "parent"  # a rewound fork (or a restart's new run) took over another run's effect
    REFRESHED = "refreshed"  # a stale read executed again as the run continued (refresh_after)


class Effects(StrEnum):
    """What a rewind does with the parent's side effects after the fork position."""

    REUSE = "reuse"
    COMPENSATE = "compensate"
    RESEND = "resend"


class Asked(StrEnum):
    """Why a run asks a person (``human_input_requested.reason``)."""

    QUESTION = "question"  # the agent's own question
    UNCERTAIN = "uncertain"  # did a side effect nobody can verify happen?
    RECOVERY = "recovery"  # graded recovery gave a failed step up to a person


class RecoveryAction(StrEnum):
    """What graded recovery chose for a failed step (``recovery_decided.action``)."""

    RETRY = "retry"  # re-attempt the failed step
    REPLAN = "replan"  # re-run the last decision with the failure in its input
    ROLLBACK = "rollback"  # compensate back to the last checkpoint and go on from there
    ASK = "ask"  # pause with a question for a person
    GIVE_UP = "give_up"  # nothing left to try: the run stays failed


class Purpose(StrEnum):
    """What a durable timer is for (``timer_set.purpose``)."""

    SLEEP = "sleep"  # a sleep's end
    RECV = "recv"  # a receive's deadline


class WaitReason(StrEnum):
    """What a run that holds no thread waits for (``run_waiting.reason``)."""

    TIMER = "timer"
    MESSAGE = "message"
    CHILD = "child"


class KeyOutcome(StrEnum):
    """How a claim of a business key ended (``agentlog runs --key``)."""

    PENDING = "pending"  # claimed, its effect's outcome not recorded yet
    COMMITTED = "committed"  # the effect happened
    RELEASED = "released"  # it did not happen: the key is free
    COMPENSATED = "compensated"  # it happened and was undone: the key is free


class LineageKind(StrEnum):
    """Where a run comes from (``engine.log.state.Lineage``), as the run index keeps it."""

    ROOT = "root"  # started by engine.run, a queue or an import
    CHILD = "child"  # spawned by its parent (or restarted by its supervisor)
    FORK = "fork"  # rewound from its parent at a position


class CircuitState(StrEnum):
    """A tool's circuit breaker state (``circuit_opened`` and its siblings, tool stats)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


__all__ = [
    "ASKING",
    "FINAL",
    "LIVE",
    "RETURNED",
    "SETTLED",
    "SUSPENDED",
    "TOOL_KINDS",
    "Asked",
    "CircuitState",
    "Effects",
    "FailureKind",
    "LineageKind",
    "Purpose",
    "RecoveryAction",
    "RunStatus",
    "Source",
    "WaitReason",
]
