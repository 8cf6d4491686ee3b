"""The one error hierarchy of agentlog.

Every error the engine raises derives from :class:`AgentlogError`; retryability is a
property of the error class. Control flow that user code must not swallow (a run
pausing for a human) derives from ``BaseException``, so ``except Exception`` in agent
code cannot eat it.
"""

from __future__ import annotations

from .kinds import FailureKind


class AgentlogError(Exception):
    """Root of every error agentlog raises."""

    retryable: bool = False


# --- usage and input -------------------------------------------------------------------


class UsageError(AgentlogError):
    """The caller asked for something that cannot be done (bad argument, bad state)."""


class RunNotFound(UsageError):
    """No run matches the given id or prefix (or the prefix is ambiguous)."""


class RunBusy(UsageError):
    """The run is executing under another owner that is still alive."""


class ReplayKeyDiffers(UsageError):
    """This engine's replay key (``AGENTLOG_SECRET_KEY``, else its key file) is not the
    one the store records for its runs: it may read the store, never execute on it."""


class CorruptData(AgentlogError):
    """Stored or imported data failed an integrity check; nothing was changed."""


class PayloadTooLarge(UsageError):
    """A payload exceeds the hard size cap; nothing was written."""


# --- the store -------------------------------------------------------------------------


class StoreError(AgentlogError):
    """The store failed; the message names it with any password masked."""


class StoreUnavailable(StoreError):
    """The store cannot be opened or reached (bad URL, server down, no such database)."""

    retryable = True


class CipherError(StoreError):
    """Stored payloads cannot be opened with the encryption settings: a wrong or missing
    ``AGENTLOG_CIPHER_KEY``, a key set for a store written in clear, or an altered row."""


class MixedRows(CipherError):
    """The store holds rows in clear and encrypted rows (written before its seal, or by
    a keyless writer of an older agentlog): ``agentlog reseal`` with the key repairs it."""


class ConcurrencyError(StoreError):
    """An append conflicted with one that committed first; nothing was written."""


class LeaseTaken(StoreError):
    """An append of a run was refused because another owner took the run's lease since
    this writer's owner did (the lease's epoch is newer than the writer's fence): this
    owner was presumed dead. Nothing was written; the run's executor stops at once
    (``LeaseLost``) and the new owner continues from the log."""


# --- replay ----------------------------------------------------------------------------


class NonDeterminismError(AgentlogError):
    """Agent code no longer matches its recorded log at a named call."""


# --- failure kinds raised by tools -----------------------------------------------------


class ToolError(AgentlogError):
    """A tool failure of a known kind. ``kind`` is what timelines and policies see."""

    kind: FailureKind = FailureKind.PERMANENT


class Transient(ToolError):
    """Passes with time (timeout, rate limit, 5xx): retry with backoff."""

    kind = FailureKind.TRANSIENT
    retryable = True


class ToolBusy(Transient):
    """A sync tool's timed attempt not made: every thread the engine gives the tool's
    timed attempts (``EngineConfig.tool_threads``) stayed busy for the attempt's timeout,
    as attempts abandoned at theirs under a hung dependency keep them. Nothing was sent;
    retried with backoff like any transient failure."""


class Permanent(ToolError):
    """Will never pass (bad arguments, no permission): fail fast."""

    kind = FailureKind.PERMANENT


class Indeterminate(ToolError):
    """The request may or may not have taken effect: only a key or a verifier can tell."""

    kind = FailureKind.INDETERMINATE


class Logical(ToolError):
    """The output is invalid (a model's answer failed validation): re-plan, never retry."""

    kind = FailureKind.LOGICAL


class InvariantViolated(Logical):
    """A state invariant of the agent (``@engine.agent(invariants=[...])``) is false after
    a step: a logical failure; ``evidence`` names the invariant, the step and the values."""

    def __init__(self, message: str, evidence: dict[str, object]) -> None:
        super().__init__(message)
        self.evidence = evidence


class BudgetExhausted(Permanent):
    """The run spent its model-call budget (``@engine.agent(budget=Budget(...))``): it
    fails here, and a resume, counting from the log, fails here again."""


class ChildFailed(AgentlogError):
    """A child run failed (or was abandoned): ``run_id`` names it, ``error`` says why.
    A supervised parent restarts the child instead, until its restart intensity."""

    def __init__(self, run_id: str, error: str | None, status: str = "failed") -> None:
        super().__init__(f"child run {run_id} {status}: {error or 'no reason recorded'}")
        self.run_id, self.error, self.status = run_id, error, status


class RunFailed(AgentlogError):
    """A run waited for by its handle (``engine.enqueue``) failed or was abandoned:
    ``run_id``, ``status`` and ``error`` say which and why."""

    def __init__(self, run_id: str, status: str, error: str | None) -> None:
        super().__init__(f"run {run_id} {status}: {error or 'no reason recorded'}")
        self.run_id, self.status, self.error = run_id, status, error


# --- control flow ----------------------------------------------------------------------


class RunInterrupt(BaseException):
    """Unwinds agent code without letting ``except Exception`` swallow it."""


class Paused(RunInterrupt):
    """The run waits for a human (a question or an uncertain side effect)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Suspended(RunInterrupt):
    """The run waits for a timer, a message or a child, holding no thread: it stops here
    (status ``waiting``) and is resumed when what it waits on is due."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DryRunStop(RunInterrupt):
    """A dry-run fork reached a side-effecting call whose declared result it cannot make
    up (``reason`` names it): the fork ends here, status ``dry_run``, nothing sent."""

    def __init__(self, reason: str, call: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.call = reason, call


class OutcomeNotRecorded(RunInterrupt):
    """A tool ran but the store failed to record what it did: the run stops here (it stays
    ``running``, resumable) and its resume resolves the call as uncertain (ledger,
    verifier, same-key re-send or a person). Agent code cannot retry past it."""


__all__ = [
    "AgentlogError",
    "ChildFailed",
    "ConcurrencyError",
    "CorruptData",
    "DryRunStop",
    "Indeterminate",
    "InvariantViolated",
    "LeaseTaken",
    "Logical",
    "NonDeterminismError",
    "OutcomeNotRecorded",
    "Paused",
    "PayloadTooLarge",
    "Permanent",
    "ReplayKeyDiffers",
    "RunBusy",
    "RunFailed",
    "RunInterrupt",
    "RunNotFound",
    "StoreError",
    "StoreUnavailable",
    "Suspended",
    "ToolBusy",
    "ToolError",
    "Transient",
    "UsageError",
]
