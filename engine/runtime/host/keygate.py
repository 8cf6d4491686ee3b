"""The replay key an engine executes with must be the one its store records.

Arguments are hashed under the replay key (:func:`engine.secrets.replay_key`), so a run
recorded under one key cannot be resumed under another. Engines sharing a store (a new
container, a worker on another machine) must share the key: the store records its
fingerprint (:mod:`engine.store.keyprint`) the first time an engine executes a run on
it, and an engine whose key differs refuses to execute there (:class:`ReplayKeyDiffers`),
before it writes anything. Reading a store never asks. An old store without the record
gets this engine's fingerprint, unless it holds runs recorded under another key.
"""

from __future__ import annotations

import hmac
import os
import threading

from ... import events as ev
from ...errors import ReplayKeyDiffers
from ...log.history import run_stream
from ...secrets import SECRET_ENV, key_check, key_path, replay_key
from ...store import Store
from ...store.keyprint import record_key, recorded_key


class KeyGate:
    """One engine's check of its replay key against the stores it executes on, made
    once per store (and key) and remembered: the check is on every run's way in."""

    def __init__(self) -> None:
        self._passed: tuple[Store, str] | None = None  # the store and the key that passed
        self._mine: tuple[bytes, str] = (b"", "")  # the last key and its fingerprint
        self._lock = threading.Lock()

    def check(self, store: Store, *, record: bool = True) -> None:
        """Refuse (``ReplayKeyDiffers``) to execute on ``store`` under a replay key that is
        not the store's; record this key as the store's when it records none yet (unless
        not ``record``: a look before deciding whether anything is to be executed)."""
        mine = self._fingerprint()
        passed = self._passed
        if passed is not None and passed[0] is store and passed[1] == mine:
            return
        with self._lock:
            recorded = recorded_key(store)
            if recorded is None:
                if _foreign_runs(store, mine):
                    raise ReplayKeyDiffers(refusal(store.name, runs=True))
                if not record:
                    return
                recorded = record_key(store, mine)
            if not hmac.compare_digest(recorded, mine):
                raise ReplayKeyDiffers(refusal(store.name, runs=False))
            self._passed = (store, mine)

    def _fingerprint(self) -> str:
        """This engine's key fingerprint, computed again only when the key changed."""
        key = replay_key()
        known, check = self._mine
        if key != known:
            check = key_check(key)
            self._mine = (key, check)
        return check


def _foreign_runs(store: Store, mine: str) -> bool:
    """Whether ``store`` (an old one, without a recorded key) holds a run recorded under
    another replay key (a run from before key checks, hashed under the legacy key, is
    nobody's). Read once per store, the first time an engine executes on it."""
    for row in store.runs():
        first = store.read(run_stream(row.run_id), upto=1)
        head = first[0].event if first else None
        check = head.key_check if isinstance(head, ev.AgentStarted) else None
        if check is not None and check != mine:  # any text (an import's): no fingerprint
            return True
    return False


def refusal(store: str, *, runs: bool) -> str:
    """The one line that refuses an engine whose replay key is not ``store``'s: which key
    it has, and how to get the store's (never the key, nor its fingerprint)."""
    whose = "some of this store's runs were recorded with" if runs else "this store records"
    if os.environ.get(SECRET_ENV):
        mine = f"{SECRET_ENV} is another key"
    else:
        mine = f"{SECRET_ENV} is not set; the key file {key_path()} is another key"
    return (
        f"{store}: the replay key differs from the one {whose} ({mine}); nothing was "
        f"written: set {SECRET_ENV} to that key (the recording machine's {SECRET_ENV}, or "
        "its file ~/.config/agentlog/secret.key) on every engine sharing the store"
    )
