"""1. Append rate: events/s through ``Store.append`` against the raw driver, per commit
size, measured in the same run in alternating order."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import events as ev
from engine.store import Append, Store
from engine.store.codec import encode_event

from .log_stores import Env, Raw, Variant, open_ours, open_raw
from .log_workload import rate, tool_succeeded


@dataclass
class AppendResult:
    variant: Variant
    batch: int
    ours: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)


def bench_append(
    env: Env, variants: list[Variant], batches: list[int], repeat: int, seconds: float
) -> list[AppendResult]:
    results = {(v, b): AppendResult(v, b) for v in variants for b in batches}
    for r in range(repeat):
        for v in variants:
            for b in batches:
                events = [tool_succeeded(i + 1) for i in range(b)]
                encoded = [encode_event(e) for e in events]
                store = open_ours(env, v, "ours")
                raw = open_raw(env, v, "raw")
                try:
                    ours_step = _ours_stepper(store, events)
                    raw_step = _raw_stepper(raw, encoded)
                    for _ in range(3):  # warm: connections, prepared statements, caches
                        ours_step()
                        raw_step()
                    # Alternate which goes first so drift does not favour one side.
                    min_steps = 3 if b > 1 else 20
                    if r % 2 == 0:
                        o = rate(ours_step, b, seconds, min_steps)
                        w = rate(raw_step, b, seconds, min_steps)
                    else:
                        w = rate(raw_step, b, seconds, min_steps)
                        o = rate(ours_step, b, seconds, min_steps)
                finally:
                    store.close()
                    raw.close()
                res = results[(v, b)]
                res.ours.append(o)
                res.raw.append(w)
                res.ratio.append(o / w)
                print(
                    f"  append {v.label:<14} x{b:<3} run {r + 1}/{repeat}: "
                    f"ours {o:>9.0f} ev/s  raw {w:>9.0f} ev/s  ratio {o / w:.2f}",
                    flush=True,
                )
    return list(results.values())


def _ours_stepper(store: Store, events: list[ev.ToolSucceeded]) -> Callable[[], None]:
    stream = uuid.uuid4()
    pos = 0

    def step() -> None:
        nonlocal pos
        store.append([Append(stream, pos + k + 1, e) for k, e in enumerate(events)])
        pos += len(events)

    return step


def _raw_stepper(raw: Raw, encoded: list[tuple[str, bytes]]) -> Callable[[], None]:
    stream = uuid.uuid4()
    pos = 0

    def step() -> None:
        nonlocal pos
        raw.insert([(stream, pos + k + 1, t, p) for k, (t, p) in enumerate(encoded)])
        pos += len(encoded)

    return step
