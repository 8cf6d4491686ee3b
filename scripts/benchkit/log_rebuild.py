"""2. Rebuild: time to fold a run's latest state at growing sizes, with snapshots and
without, against the smallest size's time in the same run."""

from __future__ import annotations

import gc
import time
import uuid
from dataclasses import dataclass, field
from functools import partial

from msgspec.structs import replace

from engine import events as ev
from engine.log.history import rebuild, run_stream
from engine.log.snapshots import save_snapshot
from engine.log.state import RunState, evolve
from engine.store import Append, Store

from .log_stores import Env, Variant, open_ours
from .log_workload import per_call, run_events


@dataclass(frozen=True)
class RunData:
    size: int
    final: RunState  # the folded latest state (of the "snap" run id)
    snap_id: str  # written with a snapshot every ``every`` events
    plain_id: str  # the same events, no snapshot


def populate(store: Store, sizes: list[int], every: int) -> dict[int, RunData]:
    """Write two runs of each size into ``store``; the events are generated here and
    dropped afterwards, so the benchmark process does not hold 100k+ live objects that
    would make every garbage collection (and so every rebuild) slower."""
    out = {}
    for n in sizes:
        events = run_events(n)
        snap_id, plain_id = uuid.uuid4().hex, uuid.uuid4().hex
        state = RunState(run_id=snap_id)
        snaps = []
        for pos, e in enumerate(events, 1):
            state = evolve(state, e, pos)
            if pos % every == 0:
                snaps.append(state)
        write_run(store, snap_id, events, snaps)
        write_run(store, plain_id, events, [])
        out[n] = RunData(n, state, snap_id, plain_id)
    return out


def write_run(store: Store, run_id: str, events: list[ev.Event], snaps: list[RunState]) -> None:
    """Write ``events`` in 1000-event commits, then each snapshot (what
    ``RunWriter(snapshot_every=100)`` leaves behind, written faster)."""
    stream = run_stream(run_id)
    for start in range(0, len(events), 1000):
        chunk = events[start : start + 1000]
        store.append([Append(stream, start + k + 1, e) for k, e in enumerate(chunk)])
    for s in snaps:
        save_snapshot(store, stream, s)


@dataclass
class RebuildResult:
    store: str
    size: int
    snap: list[float] = field(default_factory=list)  # seconds
    plain: list[float] = field(default_factory=list)
    snap_ratio: list[float] = field(default_factory=list)  # t(n)/t(smallest), same run
    plain_ratio: list[float] = field(default_factory=list)
    speedup: list[float] = field(default_factory=list)  # plain / snap


def bench_rebuild(
    env: Env, kinds: list[str], sizes: list[int], repeat: int, seconds: float, every: int
) -> list[RebuildResult]:
    results: list[RebuildResult] = []
    for kind in kinds:
        store = open_ours(env, Variant(kind, kind), "rebuild")
        try:
            t = time.perf_counter()
            runs = populate(store, sizes, every)
            gc.collect()
            print(
                f"  {kind}: generated and wrote {2 * sum(sizes)} events and their snapshots "
                f"in {time.perf_counter() - t:.1f}s"
            )
            for rd in runs.values():  # the benchmark is only worth its numbers if this holds
                got_snap = rebuild(store, rd.snap_id)
                got_plain = rebuild(store, rd.plain_id)
                assert got_snap == rd.final, f"{kind}: snapshot rebuild differs at {rd.size}"
                assert replace(got_plain, run_id=rd.snap_id) == rd.final, f"{kind}: differs"
            by_size = {n: RebuildResult(kind, n) for n in sizes}
            base = sizes[0]
            for r in range(repeat):
                ts: dict[tuple[int, bool], float] = {}
                order = sizes if r % 2 == 0 else list(reversed(sizes))
                for n in order:
                    rd = runs[n]
                    for snap, rid in ((True, rd.snap_id), (False, rd.plain_id)):
                        ts[(n, snap)] = per_call(partial(rebuild, store, rid), seconds)
                for n in sizes:
                    res = by_size[n]
                    res.snap.append(ts[(n, True)])
                    res.plain.append(ts[(n, False)])
                    res.snap_ratio.append(ts[(n, True)] / ts[(base, True)])
                    res.plain_ratio.append(ts[(n, False)] / ts[(base, False)])
                    res.speedup.append(ts[(n, False)] / ts[(n, True)])
                big = sizes[-1]
                print(
                    f"  rebuild {kind:<8} run {r + 1}/{repeat}: "
                    + "  ".join(
                        f"{n}: {ts[(n, True)] * 1e3:.2f}/{ts[(n, False)] * 1e3:.1f} ms"
                        for n in sizes
                    )
                    + f"  t({big})/t({base}) snap {ts[(big, True)] / ts[(base, True)]:.2f}",
                    flush=True,
                )
            results.extend(by_size.values())
        finally:
            store.close()
    return results
