"""The curated public surface: the names ``engine`` and ``replay`` export are pinned, so
removing or renaming one is a deliberate act (CONTRACT.md: add freely, remove never)."""

from __future__ import annotations

import dataclasses
import inspect

import engine
import replay

ENGINE_ALL = [
    "AgentlogError",
    "Budget",
    "BudgetExhausted",
    "ChildFailed",
    "CircuitBreaker",
    "ConcurrencyError",
    "CorruptData",
    "Engine",
    "EngineConfig",
    "EventView",
    "Given",
    "Indeterminate",
    "Logical",
    "NonDeterminismError",
    "Permanent",
    "Recovery",
    "RetryPolicy",
    "RunBusy",
    "RunFailed",
    "RunHandle",
    "RunResult",
    "RunState",
    "RunSummary",
    "Supervisor",
    "Transient",
    "Usage",
    "Worker",
]
REPLAY_ALL = ["compare", "export_lines", "import_run", "read_lines", "recovery_context"]
ENGINE_METHODS = [
    "open",
    "tool",
    "agent",
    "model",
    "run",
    "arun",
    "resume",
    "answer",
    "abandon",
    "rewind",
    "recover",
    "state",
    "events",
    "runs",
    "stats",
    "verify",
    "resolve",
    "enqueue",
    "aenqueue",
    "wait",
    "send",
    "queue",
    "worker",
    "workers",
]
PROJECTIONS_ALL = ["Envelope", "Projection", "RunFacts", "Runner", "ViewStatus"]


def test_engine_exports_exactly_the_pinned_names() -> None:
    assert sorted(engine.__all__) == ENGINE_ALL
    for name in engine.__all__:
        assert getattr(engine, name) is not None, name


def test_projections_exports_exactly_the_pinned_names() -> None:
    import projections

    assert sorted(projections.__all__) == PROJECTIONS_ALL
    for name in projections.__all__:
        assert getattr(projections, name) is not None, name


def test_replay_exports_exactly_the_pinned_names() -> None:
    assert sorted(replay.__all__) == REPLAY_ALL
    for name in replay.__all__:
        assert callable(getattr(replay, name)), name


def test_the_contract_import_line_works() -> None:
    from engine import (  # noqa: F401  (CONTRACT.md's import, verbatim)
        AgentlogError,
        CircuitBreaker,
        ConcurrencyError,
        Engine,
        Indeterminate,
        Logical,
        NonDeterminismError,
        Permanent,
        RetryPolicy,
        RunResult,
        Transient,
    )


def test_engine_has_every_contract_method() -> None:
    for name in ENGINE_METHODS:
        assert callable(getattr(engine.Engine, name)), name
    assert inspect.iscoroutinefunction(engine.Engine.arun)


def test_result_and_event_shapes() -> None:
    """RunResult(run_id, status, output, error); events have position, type, at, data."""

    def fields(cls: type) -> list[str]:
        if dataclasses.is_dataclass(cls):
            return [f.name for f in dataclasses.fields(cls)]
        return list(cls.__struct_fields__)  # type: ignore[attr-defined]

    assert fields(engine.RunResult)[:4] == ["run_id", "status", "output", "error"]
    assert {"position", "type", "at", "data"} <= set(fields(engine.EventView))
    assert {"run_id", "agent", "status", "started_at", "updated_at", "parent_run_id"} <= set(
        fields(engine.RunSummary)
    )


def test_errors_share_one_root() -> None:
    for name in (
        "ConcurrencyError",
        "CorruptData",
        "RunBusy",
        "Indeterminate",
        "Logical",
        "NonDeterminismError",
        "Permanent",
        "Transient",
    ):
        assert issubclass(getattr(engine, name), engine.AgentlogError), name
