"""What a drill does: the agent, its input, the kills to make and the faults to inject,
parsed from the command line (``TOOL=SECONDS``, ``TOOL=KIND``) and handed to every drilled
process as one msgspec document."""

from __future__ import annotations

import math

import msgspec

from engine.errors import UsageError
from engine.kinds import FailureKind

# The engine's failpoints a drill kills at (engine/failpoints.py): an intent committed and
# the tool not run; the tool returned, its outcome not committed; a model call returned,
# its decision not recorded; an outcome committed.
FAILPOINTS = ("after_intent", "after_tool", "after_decision", "after_outcome")
ENV = "AGENTLOG_DRILL"  # the options, to a drilled process
STEP_ENV = "AGENTLOG_DRILL_STEP"  # the step a drilled process runs (its first live call)
MALFORMED = "drill: malformed data"  # what a --malformed tool returns instead of its result
INJECTABLE = (FailureKind.TRANSIENT, FailureKind.PERMANENT, FailureKind.INDETERMINATE,
              FailureKind.LOGICAL)  # fmt: skip


class Options(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A drill: run ``target`` with ``input`` until ``kills`` kills were made."""

    target: str
    input: dict[str, object] = {}
    kills: int = 10
    latency: dict[str, float] = {}
    fail: dict[str, FailureKind] = {}
    malformed: tuple[str, ...] = ()
    stub: tuple[str, ...] = ()
    store: str | None = None
    seed: int = 0
    timer_share: float = 0.25  # the share of kills made by a timer instead of a failpoint
    failpoints: tuple[str, ...] = FAILPOINTS

    def tools_named(self) -> set[str]:
        """Every tool an option names (each must be one of the agent's)."""
        return {*self.latency, *self.fail, *self.malformed, *self.stub}


def latencies(values: list[str]) -> dict[str, float]:
    """``TOOL=SECONDS`` pairs (``--latency``)."""
    out: dict[str, float] = {}
    for value in values:
        tool, seconds = _pair(value, "--latency", "TOOL=SECONDS")
        try:
            number = float(seconds)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and 0 <= number <= 3600):
            raise UsageError(f"--latency {value!r}: SECONDS must be a number from 0 to 3600")
        out[tool] = number
    return out


def failures(values: list[str]) -> dict[str, FailureKind]:
    """``TOOL=KIND`` pairs (``--fail``), KIND one of transient, permanent, indeterminate,
    logical."""
    out: dict[str, FailureKind] = {}
    kinds = ", ".join(k.value for k in INJECTABLE)
    for value in values:
        tool, kind = _pair(value, "--fail", "TOOL=KIND")
        if kind.lower() not in {k.value for k in INJECTABLE}:
            raise UsageError(f"--fail {value!r}: KIND must be one of {kinds}")
        out[tool] = FailureKind(kind.lower())
    return out


def failpoint_names(value: str | None) -> tuple[str, ...]:
    """``--failpoints a,b``: a subset of :data:`FAILPOINTS` (default all of them)."""
    if value is None:
        return FAILPOINTS
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in FAILPOINTS]
    if unknown or not names:
        raise UsageError(f"--failpoints {value!r}: choose from {', '.join(FAILPOINTS)}")
    return names


def _pair(value: str, option: str, shape: str) -> tuple[str, str]:
    tool, sep, rest = value.partition("=")
    if not sep or not tool.strip() or not rest.strip():
        raise UsageError(f"{option} {value!r} is not {shape}")
    return tool.strip(), rest.strip()


def encode(options: Options) -> str:
    return msgspec.json.encode(options).decode()


def decode(text: str) -> Options:
    return msgspec.json.decode(text, type=Options)
