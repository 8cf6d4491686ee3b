"""The keycache: a run that re-checks 1,000 committed business keys, with and without
``?keycache=redis://127.0.0.1:6379/15`` on the same store.

One run commits ``--keys`` keyed side-effecting calls; then each repeat runs an agent
that calls the same keys again (every call answered "committed": from the ledger, or
from Redis, verified against the key stream's last row). The cache is warmed by one
such run first. Variants alternate; the figures are medians over ``--repeat`` runs, in
seconds per re-checking run, and the ratio without/with. ``--payload`` sizes each
result (over 256 KiB a result is stored out of line, as a blob).

    pip install -e ".[keycache]"
    python scripts/bench_keycache.py --keys 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

REDIS = "redis://127.0.0.1:6379/15"
PG = os.environ.get(
    "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
)


def checker(url: str, keys: int, payload: int) -> tuple[Any, Any]:
    from engine import Engine

    eng = Engine.open(url)

    @eng.tool(side_effect=True, key=lambda n: f"bench:{n}")
    def charge(n: int) -> str:
        return str(n) + os.urandom(payload // 2).hex()

    @eng.agent
    def recheck(run: Any) -> int:
        return sum(len(charge(n)) for n in range(keys))

    return eng, recheck


def measure(base: str, keys: int, repeat: int, payload: int) -> tuple[float, float]:
    sep = "&" if "?" in base else "?"
    plain, plain_agent = checker(base, keys, payload)
    cached, cached_agent = checker(f"{base}{sep}keycache={REDIS}", keys, payload)
    from engine.store.keycache import cache_of

    cache = cache_of(cached.store)
    assert cache is not None
    cache.prefix = f"agentlog-bench:{uuid.uuid4().hex}:"
    plain.run(plain_agent)  # commits the keys
    cached.run(cached_agent)  # warms the cache
    times: dict[str, list[float]] = {"plain": [], "cached": []}
    for i in range(repeat):
        order = [("plain", plain, plain_agent), ("cached", cached, cached_agent)]
        for name, eng, agent in order if i % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            eng.run(agent)
            times[name].append(time.perf_counter() - t)
    client = cache._client
    for k in client.scan_iter(cache.prefix + "*"):
        client.delete(k)
    plain.close()
    cached.close()
    return statistics.median(times["plain"]), statistics.median(times["cached"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--payload", type=int, default=0, help="bytes of each result")
    p.add_argument("--backends", default="sqlite,postgres")
    a = p.parse_args(argv)
    print("| store | keys | result bytes | without cache (s) | with cache (s) | ratio |")
    print("|---|---|---|---|---|---|")
    for backend in a.backends.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if backend == "sqlite":
                base = f"sqlite:///{tmp}/bench.db"
            else:
                schema = "bench_kc_" + uuid.uuid4().hex[:8]
                base = f"{PG}{'&' if '?' in PG else '?'}schema={schema}"
            plain, cached = measure(base, a.keys, a.repeat, a.payload)
        print(
            f"| {backend} | {a.keys} | {a.payload} | {plain:.3f} | {cached:.3f} "
            f"| {plain / cached:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
