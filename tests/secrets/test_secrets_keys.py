"""The replay key and the rules around redaction: the key lives outside the store (the
environment, or a 0600 file created once under the user's config directory), a run replays
only under the key it was recorded with (a clear error otherwise, never a false
divergence), a short secret cannot be guessed back from the store, ``redact_default=False``
opts out, and the engine's logger masks a run's secrets in every value."""

from __future__ import annotations

import io
import logging
import os
import stat
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import structlog
from agents.kit import ROOT, Crash, log_of
from conftest import all_backends, backends
from test_cli_kit import make_workdir, one_line_error, sqlite_url

from engine import Engine, NonDeterminismError
from engine import events as ev
from engine import observe as agentlog_log
from engine.errors import UsageError
from engine.log.history import RunWriter
from engine.log.state import RunState
from engine.runtime.defs.definitions import args_hash
from engine.secrets import MASK, Seen, key_check, key_path, replay_key

PRINT_KEY = "from engine.secrets import replay_key; print(replay_key().decode())"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config directory of this test's own, with no key in the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AGENTLOG_SECRET_KEY", raising=False)
    return tmp_path / "config"


def test_the_key_file_is_created_once_with_mode_0600_by_racing_processes(home: Path) -> None:
    """Six processes asking for the key at once agree on one key, written once to
    ``$XDG_CONFIG_HOME/agentlog/secret.key`` with mode 0600 (directory 0700); later calls
    read it and never rewrite it; no temporary file is left behind."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", PRINT_KEY], env=env, stdout=subprocess.PIPE)
        for _ in range(6)
    ]
    keys = {p.communicate(timeout=60)[0].decode().strip() for p in procs}
    path = home / "agentlog" / "secret.key"
    assert key_path() == path
    assert keys == {path.read_text().strip()} and len(keys.pop()) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert replay_key() == before[0].strip()
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret.key"]


def test_without_xdg_config_home_the_key_file_is_under_dot_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No XDG_CONFIG_HOME: the file is ``~/.config/agentlog/secret.key``."""
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert key_path() == tmp_path / ".config" / "agentlog" / "secret.key"


def test_agentlog_secret_key_is_used_instead_of_the_file(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENTLOG_SECRET_KEY`` is the key, and no file is created."""
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", "shared-by-every-machine")
    assert replay_key() == b"shared-by-every-machine"
    assert not (home / "agentlog").exists()


@all_backends
def test_a_changed_replay_key_is_a_clear_error_not_a_divergence(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paused run whose calls were hashed under one key: under another, resume, verify,
    answer and rewind each refuse with UsageError naming AGENTLOG_SECRET_KEY (not
    NonDeterminismError) and write nothing; with the key back, answer completes it."""
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", "key-of-machine-a")
    count: Counter[str] = Counter()

    @eng.tool
    def lookup(customer: str) -> str:
        count["lookup"] += 1
        return f"name of {customer}"

    @eng.agent
    def support(run: Any) -> dict[str, str]:
        name = lookup("c1")
        run.checkpoint("looked-up")
        return {"name": name, "answer": run.ask("approve?")}

    r = eng.run(support)
    assert r.status == "paused"
    before = log_of(eng, r.run_id)
    assert before[0][2]["key_check"] == key_check(b"key-of-machine-a")
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", "key-of-machine-b")
    for act in (
        lambda: eng.resume(r.run_id),
        lambda: eng.verify(r.run_id),
        lambda: eng.answer(r.run_id, "yes"),
        lambda: eng.rewind(r.run_id, to="looked-up"),
    ):
        with pytest.raises(UsageError, match=r"replay key differs.*AGENTLOG_SECRET_KEY") as e:
            act()
        assert not isinstance(e.value, NonDeterminismError)
    assert log_of(eng, r.run_id) == before and len(eng.runs()) == 1
    monkeypatch.setenv("AGENTLOG_SECRET_KEY", "key-of-machine-a")
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", {"name": "name of c1", "answer": "yes"})
    assert count == {"lookup": 1}  # replayed by its hash, not called again


@backends("sqlite", "postgres")
def test_resume_on_a_machine_with_another_key_file_exits_2_naming_the_key(
    store_url: str, tmp_path: Path
) -> None:
    """``agentlog resume`` where the key file differs (another machine): exit 2, one line
    naming AGENTLOG_SECRET_KEY; copying the key file over makes it resume."""
    url = store_url if store_url.startswith("postgres") else sqlite_url(tmp_path)
    work = make_workdir(tmp_path, url)
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    paused = work.cli("run", "agents:asker", "--json", env={"XDG_CONFIG_HOME": str(a)})
    assert paused.code == 3, paused
    rid = paused.json()["run_id"]
    refused = work.cli("answer", rid, "yes", env={"XDG_CONFIG_HOME": str(b)})
    one_line_error(refused, "replay key differs", "AGENTLOG_SECRET_KEY")
    (b / "agentlog" / "secret.key").write_bytes((a / "agentlog" / "secret.key").read_bytes())
    done = work.cli("answer", rid, "yes", "--json", env={"XDG_CONFIG_HOME": str(b)})
    assert done.code == 0 and done.json()["status"] == "completed", done


@all_backends
def test_a_short_secret_cannot_be_guessed_back_from_the_stored_hash(eng: Engine) -> None:
    """A 4-digit redacted PIN: trying all 10,000 under the old public key finds nothing;
    only the replay key (which the store does not hold) finds it."""

    @eng.tool(redact=("pin_code",))
    def unlock(door: str, pin_code: str) -> bool:
        return True

    @eng.agent
    def opener(run: Any) -> bool:
        return bool(unlock("front", "4821"))

    r = eng.run(opener)
    (intent,) = [d for _, t, d in log_of(eng, r.run_id) if t == "tool_invoked"]
    assert intent["args"] == {"door": "front", "pin_code": "<redacted>"}
    tool = intent["tool"]

    def guesses(key: bytes) -> list[str]:
        return [
            pin
            for pin in (f"{i:04d}" for i in range(10_000))
            if args_hash(tool, {"door": "front", "pin_code": pin}, key) == intent["args_hash"]
        ]

    assert guesses(b"agentlog/args/v1") == []
    assert guesses(replay_key()) == ["4821"]  # the attack works with the key: it is the key


def test_redact_default_false_opts_out_and_redact_adds_names() -> None:
    """``redact=`` adds names to the default list; ``redact_default=False`` keeps only them."""
    eng = Engine.open("memory://")

    @eng.tool(redact=("pin",))
    def both(token: str, pin: str, user: str) -> None: ...

    @eng.tool(redact=("pin",), redact_default=False)
    def only_pin(token: str, pin: str, user: str) -> None: ...

    args = {"token": "t-1", "pin": "1234", "user": "ann"}
    shown_both = both.__agentlog_tool__.redacted(args)  # type: ignore[attr-defined]
    shown_only = only_pin.__agentlog_tool__.redacted(args)  # type: ignore[attr-defined]
    assert shown_both == {"token": "<redacted>", "pin": "<redacted>", "user": "ann"}
    assert shown_only == {"token": "t-1", "pin": "<redacted>", "user": "ann"}


def test_seen_secrets_are_masked_also_as_json_and_urls_escape_them_but_not_when_short() -> None:
    """A value seen is masked as written, JSON-escaped and URL-encoded; values shorter
    than four characters are not masked (they would mask everything)."""
    seen = Seen()
    seen.add({"a": 'p@ss "w/rd"', "b": ["abc", 12345]})
    text = 'p@ss "w/rd" | "p@ss \\"w/rd\\"" | ?k=p%40ss%20%22w%2Frd%22 | abc | 12345'
    assert seen.mask(text) == f'{MASK} | "{MASK}" | ?k={MASK} | abc | {MASK}'


def test_the_engine_logger_masks_a_runs_secrets_in_every_value() -> None:
    """A run's logger masks the secrets seen so far in every value it is given, nested
    ones too, as the application's configured renderer writes them."""
    old = structlog.get_config()
    out = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(out),
    )
    try:
        secret = f"tok-{uuid.uuid4().hex}"
        seen = Seen()
        logger = agentlog_log.get(run_id="r1").masking(seen)
        seen.add(secret)
        logger.warning("oops", error=f"refused {secret}", detail={"why": [secret]})
    finally:
        structlog.configure(**old)
    line = out.getvalue()
    assert "oops" in line and secret not in line and line.count(MASK) == 2


@all_backends
def test_a_run_recorded_before_the_key_check_replays_under_the_legacy_key(
    eng: Engine,
) -> None:
    """A run with no key check (recorded by an earlier version, its hashes under the old
    key) still resumes: its recorded call is replayed, not run again."""
    count: Counter[str] = Counter()

    @eng.tool
    def fetch(item: str) -> str:
        count["fetch"] += 1
        return f"got {item}"

    @eng.agent
    def legacy(run: Any) -> str:
        return str(fetch("x")) + " " + str(run.decide("d", lambda: "new"))

    rid = uuid.uuid4().hex
    name = fetch.__agentlog_tool__.name  # type: ignore[attr-defined]
    old = args_hash(name, {"item": "x"}, b"agentlog/args/v1")
    w = RunWriter(eng.store, RunState(run_id=rid))
    w.append(ev.AgentStarted(at=ev.now(), agent=legacy.name, import_path=legacy.import_path))
    w.append(
        ev.ToolInvoked(at=ev.now(), call=1, tool=name, args={"item": "x"}, args_hash=old),
        ev.ToolSucceeded(at=ev.now(), call=1, tool=name, result="got x"),
    )
    r = eng.resume(rid)
    assert (r.status, r.output, count) == ("completed", "got x new", Counter())


@all_backends
def test_compensation_and_verified_results_are_redacted_too(eng: Engine) -> None:
    """A compensation's result and a verifier's result (settling, on abandon, an effect
    whose process died mid-call) are tool results: stored redacted."""
    secret = f"S3CR3T-{uuid.uuid4().hex}"

    def undo(receipt: dict[str, str]) -> dict[str, str]:
        return {"voided": receipt["id"], "void_token": secret}

    def find(key: str) -> dict[str, str]:
        return {"id": "hotel", "booking_token": secret}

    @eng.tool(side_effect=True, compensate=undo, verify=find)
    def book(item: str) -> dict[str, str]:
        raise Crash  # the process dies once the request is out

    @eng.agent
    def trip(run: Any) -> str:
        book("hotel")
        return "booked"

    rid = uuid.uuid4().hex
    with pytest.raises(Crash):
        eng.run(trip, run_id=rid)
    assert eng.abandon(rid).status == "abandoned"
    events = log_of(eng, rid)
    (booked,) = [d for _, t, d in events if t == "tool_succeeded"]
    (undone,) = [d for _, t, d in events if t == "compensated"]
    assert booked["result"] == {"id": "hotel", "booking_token": "<redacted>"}
    assert undone["result"] == {"voided": "hotel", "void_token": "<redacted>"}
    assert secret not in repr(events)
