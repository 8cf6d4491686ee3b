"""The timeline's lines for what operators and the engine's housekeeping record: a run
imported and adopted, held for approval and approved, the time its saves took, a tool's
circuit breaker. Each renderer takes the event and its time (the narrator's memory is
not needed for these)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import events as ev

from .output import Piece, brief


def _imported(e: ev.RunImported, at: float) -> list[Piece]:
    signed = "signed" if e.signed else "unsigned"
    where = f"from {e.source or '?'} by {e.by or '?'} ({signed})"
    return [("⇣ imported ", "bold magenta"), where, ("  history only until adopted", "dim")]


def _adopted(e: ev.RunAdopted, at: float) -> list[Piece]:
    return [("✓ adopted ", "bold magenta"), f"by {e.by or '?'}: runs as {e.agent}"]


def _held(e: ev.RunHeld, at: float) -> list[Piece]:
    return [("⏸ held for approval ", "bold yellow"), e.reason, ("  agentlog approve RUN", "dim")]


def _approved(e: ev.RunApproved, at: float) -> list[Piece]:
    return [("✓ approved ", "bold yellow"), f"by {e.by or '?'} (agentlog {e.via})"]


def _saves(e: ev.SavesTimed, at: float) -> list[Piece]:
    parts = [
        f"{n} {what}{'' if n == 1 else 's'} in {ms:.1f} ms"
        for n, what, ms in (
            (e.checkpoints, "checkpoint", e.checkpoint_ms),
            (e.snapshots, "snapshot", e.snapshot_ms),
        )
        if n
    ]
    return [("⏱ saved ", "dim"), (", ".join(parts) or "nothing", "dim")]


def _circuit(
    e: ev.CircuitOpened | ev.CircuitHalfOpened | ev.CircuitClosed, at: float
) -> list[Piece]:
    return [("⚡ circuit ", "yellow"), e.tool, f" {brief(ev.event_data(e))}"]


RENDER: dict[type[ev.Event], Callable[[Any, float], list[Piece]]] = {
    ev.RunImported: _imported,
    ev.RunAdopted: _adopted,
    ev.RunHeld: _held,
    ev.RunApproved: _approved,
    ev.SavesTimed: _saves,
    ev.CircuitOpened: _circuit,
    ev.CircuitHalfOpened: _circuit,
    ev.CircuitClosed: _circuit,
}
