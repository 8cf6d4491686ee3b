"""A sealed store refuses a writer without its key, or with another key, before that
writer writes anything: no clear payload ever lands among sealed rows."""

from __future__ import annotations

from typing import Any

import pytest
from agents.kit import stored_bytes
from conftest import backends
from eventsourcing.cipher import AESCipher

from engine import Engine
from engine.errors import CipherError
from engine.store.cipher import CIPHER_ENV
from replay.cli.entry import run_cli

kit = Engine.open("memory://")
HOLDER = "Josephine Quackenbush"


@kit.tool
def charge(holder: str) -> str:
    return f"charged {holder}"


@kit.agent
def card(run: Any, holder: str) -> str:
    done: str = charge(holder)
    return done


def _second_run(url: str) -> None:
    eng = Engine(url)
    try:
        eng.run(card, holder=HOLDER)
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_a_keyless_or_other_key_writer_is_refused_by_a_sealed_store(
    store_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first run sealed the store; without the key, or with another, the next engine
    is refused naming the variable, the holder's name is never in the store's bytes, and
    with the key ``stats`` reads the whole store."""
    monkeypatch.setenv(CIPHER_ENV, AESCipher.create_key(32))
    eng = Engine(store_url)
    try:
        assert eng.run(card, holder=HOLDER).status == "completed"
        assert HOLDER.encode() not in stored_bytes(store_url, eng)
    finally:
        eng.close()
    with monkeypatch.context() as env:
        env.delenv(CIPHER_ENV)
        with pytest.raises(CipherError, match=f"sealed .* {CIPHER_ENV} is not set"):
            _second_run(store_url)
        env.setenv(CIPHER_ENV, AESCipher.create_key(32))
        with pytest.raises(CipherError, match="not the key this store was sealed with"):
            _second_run(store_url)
    eng = Engine(store_url)
    try:
        assert HOLDER.encode() not in stored_bytes(store_url, eng)
        assert len(eng.runs()) == 1
    finally:
        eng.close()
    capsys.readouterr()
    assert run_cli(["stats", "--url", store_url]) == 0
