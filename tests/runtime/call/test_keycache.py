"""The keycache (``?keycache=redis://...``) in front of the ledger, on a real Redis: a
committed key is answered from the cache (no ledger read), a flushed cache or Redis down
reads the ledger (no duplicate), a released (compensated) key is not hidden by a stale
entry, and the cached value is sealed when the store is."""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from agents.kit import python
from conftest import backends

from engine import Engine
from engine.runtime.call import ledger
from engine.store import Store
from engine.store.keycache import cache_of

REDIS = "redis://127.0.0.1:6379/15"


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix of this test alone in Redis db 15 (its keys deleted after)."""
    p = f"agentlog-test:{uuid.uuid4().hex}:"
    yield p
    client = redis.Redis.from_url(REDIS)
    for k in client.scan_iter(p + "*"):
        client.delete(k)


def cached_engine(store_url: str, prefix: str, target: str = REDIS) -> Engine:
    sep = "&" if "?" in store_url else "?"
    eng = Engine.open(f"{store_url}{sep}keycache={target}")
    cache = cache_of(eng.store)
    assert cache is not None
    cache.prefix = prefix
    return eng


def count_ledger_reads(store: Store, key: str) -> Counter[str]:
    """Count the store's reads of ``key``'s ledger stream (the instance's ``read`` wrapped)."""
    seen: Counter[str] = Counter()
    inner, stream = store.read, ledger.stream_of(key)

    def read(sid: uuid.UUID, **kw: Any) -> Any:
        seen["ledger"] += sid == stream
        return inner(sid, **kw)

    store.read = read  # type: ignore[method-assign]
    return seen


def refunder_on(eng: Engine, count: Counter[str]) -> Any:
    @eng.tool(side_effect=True, key=lambda order: f"refund:{order}")
    def refund(order: str) -> dict[str, str]:
        count[order] += 1
        return {"receipt": f"R-{order}"}

    @eng.agent
    def refunder(run: Any, order: str) -> dict[str, str]:
        return dict(refund(order))

    return refunder


@backends("sqlite", "postgres")
def test_a_committed_key_is_answered_from_the_cache(store_url: str, prefix: str) -> None:
    eng, count = cached_engine(store_url, prefix), Counter[str]()
    try:
        agent = refunder_on(eng, count)
        eng.run(agent, order="o1")  # executes and commits
        eng.run(agent, order="o1")  # reads the ledger (committed): cached from then on
        reads = count_ledger_reads(eng.store, "refund:o1")
        third = eng.run(agent, order="o1")
        assert third.output == {"receipt": "R-o1"}
        assert count == {"o1": 1}
        assert reads["ledger"] == 0  # answered from the cache
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_a_flushed_cache_reads_the_ledger(store_url: str, prefix: str) -> None:
    eng, count = cached_engine(store_url, prefix), Counter[str]()
    try:
        agent = refunder_on(eng, count)
        eng.run(agent, order="o1")
        eng.run(agent, order="o1")
        client = redis.Redis.from_url(REDIS)
        for k in client.scan_iter(prefix + "*"):  # this test's FLUSHALL
            client.delete(k)
        reads = count_ledger_reads(eng.store, "refund:o1")
        again = eng.run(agent, order="o1")
        assert again.output == {"receipt": "R-o1"} and count == {"o1": 1}
        assert reads["ledger"] >= 1  # the ledger decided
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_redis_down_runs_complete_without_a_duplicate(store_url: str, prefix: str) -> None:
    eng, count = cached_engine(store_url, prefix, "redis://127.0.0.1:1/0"), Counter[str]()
    try:
        agent = refunder_on(eng, count)
        outs = [eng.run(agent, order="o1").output for _ in range(3)]
        assert outs == [{"receipt": "R-o1"}] * 3 and count == {"o1": 1}
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_a_compensated_key_is_not_answered_committed(store_url: str, prefix: str) -> None:
    """The key's effect undone (its claim released as compensated, what the saga writes):
    the cached "committed" names a row that is no longer the stream's last, so the next
    run reads the ledger, finds the key free and makes a new effect."""
    eng, count = cached_engine(store_url, prefix), Counter[str]()
    try:
        agent = refunder_on(eng, count)
        first = eng.run(agent, order="o1")
        eng.run(agent, order="o1")  # cached now
        held = ledger.read_ledger(eng.store, "refund:o1")
        assert held.claim is not None
        undo = ledger.release_event(
            "refund:o1", held.version, first.run_id, held.claim.call, ledger.COMPENSATED, at=1.0
        )
        eng.store.append([undo])
        eng.run(agent, order="o1")
        assert count == {"o1": 2}  # a new effect, not the undone one's cached outcome
    finally:
        eng.close()


@backends("sqlite")
def test_the_cached_value_is_sealed_on_a_sealed_store(
    store_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.store.cipher import CIPHER_ENV

    monkeypatch.setenv(CIPHER_ENV, base64.b64encode(b"k" * 32).decode())
    eng, count = cached_engine(store_url, prefix), Counter[str]()
    try:
        agent = refunder_on(eng, count)
        eng.run(agent, order="secret-order")
        eng.run(agent, order="secret-order")
        client = redis.Redis.from_url(REDIS)
        values = [client.get(k) for k in client.scan_iter(prefix + "*")]
        assert values and all(b"R-secret-order" not in v for v in values if v)
        assert eng.run(agent, order="secret-order").output == {"receipt": "R-secret-order"}
        assert count == {"secret-order": 1}
    finally:
        eng.close()


SCRIPT = """
import sys
from pathlib import Path
from engine import Engine

url, sent = sys.argv[1], Path(sys.argv[2])
eng = Engine.open(url)
prefix = sys.argv[3]
from engine.store.keycache import cache_of
cache_of(eng.store).prefix = prefix

@eng.tool(side_effect=True, key=lambda order: f"pay:{order}")
def pay(order: str) -> str:
    with sent.open("a") as f:
        f.write(order + "\\n")
    return "P-" + order

@eng.agent
def payer(run, order: str) -> str:
    return pay(order)

print(eng.run(payer, order="o1").output)
"""


@pytest.mark.processes
@backends("sqlite", "postgres")
def test_killed_between_the_ledger_read_and_the_cache_write(
    store_url: str, prefix: str, tmp_path: Path
) -> None:
    """A process SIGKILLed after it read the committed key and before it cached it: the
    next process (cache empty) still gets the committed outcome from the ledger."""
    script, sent = tmp_path / "payer.py", tmp_path / "sent.txt"
    script.write_text(SCRIPT)
    sep = "&" if "?" in store_url else "?"
    url = f"{store_url}{sep}keycache={REDIS}"
    first = python(str(script), url, str(sent), prefix)
    assert first.returncode == 0, first.stderr
    killed = python(
        str(script), url, str(sent), prefix, env={"AGENTLOG_FAILPOINTS": "in_keycache_put"}
    )
    assert killed.returncode == -9, killed.stderr
    assert not list(redis.Redis.from_url(REDIS).scan_iter(prefix + "*"))  # never cached
    again = python(str(script), url, str(sent), prefix)
    assert again.returncode == 0 and again.stdout.strip() == "P-o1", again.stderr
    assert sent.read_text().split() == ["o1"]  # the effect happened once


def test_a_redis_password_in_the_url_is_masked_in_the_store_name() -> None:
    from engine.store import mask

    clear = "sqlite:///x.db?keycache=redis://127.0.0.1:6379/0"
    assert mask(clear) == clear
    for url in (
        "sqlite:///x.db?keycache=redis://u:hunter2@h:6379/0",
        "postgresql://app:pw@db/agentlog?keycache=redis%3A//:hunter2%40h:6379/0",
    ):
        assert "hunter2" not in mask(url) and "keycache=***" in mask(url)


@backends("sqlite", "postgres")
def test_a_key_compensated_by_abandon_is_not_answered_from_the_cache(
    store_url: str, prefix: str
) -> None:
    """Run A holds the key and pauses; run B reads it committed (cached now); A is
    abandoned, its effect undone: run C makes a new effect, not the undone one's result."""
    eng, sent, undone = cached_engine(store_url, prefix), Counter[str](), list[str]()
    try:

        @eng.tool(side_effect=True, key=lambda order: f"hold:{order}", compensate=undone.append)
        def hold(order: str) -> str:
            sent[order] += 1
            return f"H-{order}-{sent[order]}"

        @eng.agent
        def booking(run: Any, order: str) -> Any:
            got = hold(order)
            run.ask("confirm?")
            return got

        a = eng.run(booking, order="o1")
        assert eng.run(booking, order="o1").status == "paused"  # the key read, cached
        assert [k for k in redis.Redis.from_url(REDIS).scan_iter(prefix + "*")]
        assert eng.abandon(a.run_id).status == "abandoned" and undone == ["H-o1-1"]
        eng.run(booking, order="o1")
        assert sent == {"o1": 2}  # a new effect after the undo
    finally:
        eng.close()
