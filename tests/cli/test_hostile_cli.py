"""Hostile command lines: every absurd argument exits 2 with one line and changes nothing,
a failed export never destroys the file it was to replace, a reader that goes away is no
error, and nothing recorded can drive the terminal that shows it."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import backends
from test_cli_kit import (
    Result,
    Workdir,
    clean_env,
    make_workdir,
    one_line_error,
    sqlite_url,
)

from engine.log.history import run_stream
from engine.polling import poll_until
from replay.cli.entry import run_cli

EVIL = "\x1b[2J\r\x07"
RAW = ("\x1b", "\r", "\x07")

HOSTILE = f"""
from engine import Engine

engine = Engine.open()
EVIL = {EVIL!r}


def _shout(text):
    return "said " + text + EVIL


_shout.__name__ = _shout.__qualname__ = "shout" + EVIL
shout = engine.tool(_shout)


@engine.agent(name="hostile:evil" + EVIL)
def evil(run):
    said = shout("hi" + EVIL)
    run.checkpoint("mark" + EVIL)
    return {{"said" + EVIL: said, "answer": run.ask("question" + EVIL)}}


@engine.agent
def chatty(run, n: int = 1500):
    return [run.decide("d", lambda i=i: "x" * 40 + str(i)) for i in range(n)]
"""


@pytest.fixture(autouse=True)
def own_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process runs import ``agents`` from this test's directory, not one cached by an
    earlier test; what they add to sys.path and sys.modules is undone afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    names = ("agents", "hostile", "broken")
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture
def work(tmp_path: Path) -> Workdir:
    w = make_workdir(tmp_path, sqlite_url(tmp_path))
    (tmp_path / "hostile.py").write_text(HOSTILE)
    return w


def cli(work: Workdir, *args: str, capsys: pytest.CaptureFixture[str]) -> Result:
    """``agentlog ARGS --url URL`` in-process (the same entry point as the console script)."""
    old = os.getcwd()
    os.chdir(work.path)
    try:
        code = run_cli([*args, "--url", work.url])
    finally:
        os.chdir(old)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def store_bytes(work: Workdir) -> bytes:
    return (work.path / "agentlog.db").read_bytes()


# --- absurd arguments: exit 2, one line, nothing changed --------------------------------

BIG = str(10**30)
DEEP = "[" * 2000 + "]" * 2000
DIGITS = "9" * 5000


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "agents:hello", "--input", f'{{"name": {BIG}}}'], "beyond 64 bits"),
        (["run", "agents:hello", "--input", f'{{"name": -{BIG}}}'], "beyond 64 bits"),
        (["run", "agents:hello", "--input", f'{{"name": {2**64}}}'], "beyond 64 bits"),
        (["run", "agents:hello", "--input", f'{{"name": {DIGITS}}}'], "beyond 64 bits"),
        (["run", "agents:hello", "--input", f'{{"name": {DEEP}}}'], "deeper than 100"),
        (["run", "agents:hello", "--input", '{"n":' + "[" * 101 + "]" * 101 + "}"], "deeper"),
        (["answer", "@", "--json-value", BIG], "beyond 64 bits"),
        (["answer", "@", "--json-value", f'{{"a": [{DIGITS}]}}'], "beyond 64 bits"),
        (["answer", "@", "--json-value", DEEP], "deeper than 100"),
        (["answer", "@", "--json-value", '"\\ud800"'], "lone surrogate"),
        (["run", "agents:hello", "--input", '{"\\udc00": "x"}'], "lone surrogate"),
        (["run", "agents:hello", "--input", '{"name": 1e999}'], "not a finite number"),
        (["answer", "@", "--json-value", "[NaN]"], "not a finite number"),
        (["state", "@", "--at", BIG], "--at"),
        (["state", "@", "--at", str(2**63)], "below 2**63"),
        (["state", "@", "--at", DIGITS], "--at"),
        (["rewind", "@", "--to", BIG], "--to"),
        (["rewind", "@", "--to", DIGITS], "--to"),
        (["diff", f"@@{DIGITS}", "@"], "AT"),
        (["show", "a" * 100_000], "at most 128"),
        (["timeline", "r" * 129], "at most 128"),
        (["export", "a" * 100_000, "-o", "x"], "at most 128"),
        (["show", "ab" + EVIL], "control characters"),
        (["run", "agents:hello", "--run-id", "x\x00y"], "--run-id"),
        (["run", "agents:hello", "--run-id", "z" * 100_000], "--run-id"),
        (["show", "ab\udcff"], "argument 2 is not valid UTF-8"),
        (["run", "agents:hello", "--input", '{"name": "\udcfe"}'], "not valid UTF-8"),
    ],
)
def test_absurd_arguments_exit_2_with_one_line_and_change_nothing(
    work: Workdir, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    """Integers beyond 64 bits, 2,000-deep nesting, 5,000-digit positions, 100k-character
    or control-character run ids and bytes that are not UTF-8 are refused before they reach
    the store; the store's bytes are unchanged."""
    assert cli(work, "run", "agents:asker", "--run-id", "paused1", capsys=capsys).code == 3
    before = store_bytes(work)
    r = cli(work, *[a.replace("@", "paused1", 1) for a in args], capsys=capsys)
    one_line_error(r, needle)
    for raw in (*RAW, "\x00"):
        assert raw not in r.err
    assert store_bytes(work) == before


def test_in_range_values_still_pass(work: Workdir, capsys: pytest.CaptureFixture[str]) -> None:
    """The limits sit where they say: 64-bit integers, 100 levels and 128-character ids pass."""
    assert cli(work, "run", "agents:asker", "--run-id", "p" * 128, capsys=capsys).code == 3
    value = f'{{"u": {2**64 - 1}, "i": {-(2**63)}, "deep": {"[" * 99 + "]" * 99}}}'
    r = cli(work, "answer", "p" * 128, "--json-value", value, "--json", capsys=capsys)
    assert r.code == 0, r
    assert r.json()["output"]["answer"]["u"] == 2**64 - 1
    assert cli(work, "state", "p" * 128, "--at", "0" * 40 + "1", capsys=capsys).code == 0


def raw_agentlog(args: list[bytes], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "replay.cli", *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_invalid_utf8_arguments_through_a_real_process(work: Workdir) -> None:
    """Bytes that are not UTF-8, as a shell passes them: exit 2, the argument named, the
    bytes shown escaped, no traceback."""
    url = work.url.encode()
    for argv, place in (
        ([b"show", b"\xff", b"--url", url], b"argument 2"),
        ([b"--url", url, b"run", b"agents:hello", b"--input", b'{"name": "\xc3"}'], b"argument 6"),
        ([b"runs", b"--status", b"\xfe\xfe"], b"argument 3"),
    ):
        proc = raw_agentlog(argv, work.path)
        assert proc.returncode == 2, proc
        assert proc.stderr.count(b"\n") == 1 and b"Traceback" not in proc.stderr, proc.stderr
        assert place in proc.stderr and b"not valid UTF-8" in proc.stderr, proc.stderr
    assert not (work.path / "agentlog.db").exists()


def test_huge_numbers_and_ids_through_a_real_process(work: Workdir) -> None:
    """Spot checks of the same guards without the in-process shortcut."""
    assert work.cli("run", "agents:asker", "--run-id", "p1").code == 3
    one_line_error(work.cli("answer", "p1", "--json-value", BIG), "beyond 64 bits")
    one_line_error(work.cli("state", "p1", "--at", DIGITS), "--at")
    one_line_error(work.cli("show", "a" * 100_000), "at most 128")
    one_line_error(work.cli("run", "agents:hello", "--input", f'{{"a": {DEEP}}}'), "deeper")


# --- prefixes ---------------------------------------------------------------------------


@backends("sqlite", "postgres")  # memory:// is one process's store; see test_store_contract
def test_run_prefixes_are_case_sensitive_on_every_store(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs whose ids differ only in case are told apart by a prefix on every store."""
    work = make_workdir(tmp_path, store_url)
    for run_id in ("Case1", "case2", "CASE3"):
        assert cli(work, "run", "agents:hello", "--run-id", run_id, capsys=capsys).code == 0
    for prefix, found in (("case", "case2"), ("Ca", "Case1"), ("CA", "CASE3")):
        r = cli(work, "show", prefix, "--json", capsys=capsys)
        assert r.code == 0 and r.json()["run_id"] == found, (prefix, r)
    one_line_error(cli(work, "show", "cAse", capsys=capsys), "no run matches")
    one_line_error(cli(work, "show", "C", capsys=capsys), "ambiguous")


# --- export -o: nothing destroyed -------------------------------------------------------


def _precious(work: Workdir) -> Path:
    target = work.path / "out.jsonl"
    target.write_bytes(b"precious\n")
    return target


def _leftovers(work: Workdir) -> list[str]:
    return sorted(p.name for p in work.path.iterdir() if p.name.endswith(".tmp"))


def test_export_to_a_file_writes_it_whole(
    work: Workdir, capsys: pytest.CaptureFixture[str]
) -> None:
    """A successful export replaces FILE with exactly what stdout would have shown, keeping
    FILE's permissions."""
    run_id = work.run_id("agents:hello", code=0)
    target = _precious(work)
    target.chmod(0o640)
    assert cli(work, "export", run_id[:8], "-o", str(target), capsys=capsys).code == 0
    assert target.read_text() == cli(work, "export", run_id, capsys=capsys).out
    assert target.stat().st_mode & 0o777 == 0o640 and not _leftovers(work)


def test_export_of_a_wrong_run_leaves_the_file_alone(
    work: Workdir, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown run id: exit 2 and FILE keeps its bytes, with no temporary file left."""
    work.run_id("agents:hello", code=0)
    target = _precious(work)
    one_line_error(cli(work, "export", "feedface", "-o", str(target), capsys=capsys), "feedface")
    assert target.read_bytes() == b"precious\n" and not _leftovers(work)


def test_export_of_a_log_damaged_mid_stream_leaves_the_file_alone(
    work: Workdir, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log damaged after the first page of events: the export has written a thousand
    lines when it finds the gap; it exits 2 naming the position, and FILE is untouched."""
    run_id = work.run_id("hostile:chatty", code=0)
    db = work.path / "agentlog.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "DELETE FROM agentlog_events WHERE originator_id=? AND originator_version=1200",
            (run_stream(run_id).hex,),
        )
    target = _precious(work)
    r = cli(work, "export", run_id, "-o", str(target), capsys=capsys)
    one_line_error(r, "position 1200")
    assert target.read_bytes() == b"precious\n" and not _leftovers(work)


@pytest.mark.parametrize(
    ("where", "needle"),
    [
        (".", "is a directory"),
        ("missing/dir/out.jsonl", "no such directory"),
        ("agents.py/out.jsonl", "no such directory"),
        ("/proc/out.jsonl", "cannot write"),
    ],
)
def test_export_to_a_place_that_cannot_hold_a_file_exits_2(
    work: Workdir, capsys: pytest.CaptureFixture[str], where: str, needle: str
) -> None:
    """A directory, a missing parent directory or an unwritable place: one line, exit 2."""
    run_id = work.run_id("agents:hello", code=0)
    path = where if where.startswith("/") else str(work.path / where)
    one_line_error(cli(work, "export", run_id, "-o", path, capsys=capsys), needle)
    assert not _leftovers(work)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file permissions")
def test_export_over_a_read_only_file_exits_2(
    work: Workdir, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file its owner made read-only is not replaced behind their back."""
    run_id = work.run_id("agents:hello", code=0)
    target = _precious(work)
    target.chmod(0o444)
    one_line_error(cli(work, "export", run_id, "-o", str(target), capsys=capsys), "cannot write")
    assert target.read_bytes() == b"precious\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_export_leaves_the_file_whole(work: Workdir, sig: signal.Signals) -> None:
    """A real export process interrupted (SIGINT) or killed (SIGKILL) while it writes: FILE
    is either as it was or the complete export, never cut; an interrupt removes its
    temporary file."""
    run_id = work.run_id("hostile:chatty", "--input", '{"n": 4000}', code=0)
    full = work.cli("export", run_id).out.encode()
    target = _precious(work)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "replay.cli",
            "export",
            run_id,
            "-o",
            str(target),
            "--url",
            work.url,
        ],
        cwd=work.path,
        env=clean_env(),
        stderr=subprocess.PIPE,
    )

    def begun() -> bool:  # to write, or ended
        untouched = target.read_bytes() == b"precious\n"
        return proc.poll() is not None or bool(_leftovers(work)) or not untouched

    poll_until(begun, None, first=0.001, most=0.001)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert target.read_bytes() in (b"precious\n", full), target.read_bytes()[:200]
    assert b"Traceback" not in err, err
    if sig == signal.SIGINT:
        assert proc.returncode in (0, 130), (proc.returncode, err)
        assert not _leftovers(work)


# --- a reader that goes away ------------------------------------------------------------


def _closed_reader(work: Workdir, *args: str, read: int = 0) -> tuple[int, bytes]:
    """Run agentlog with stdout on a pipe whose reader takes ``read`` bytes and leaves."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli", *args, "--url", work.url],
        cwd=work.path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if read:
        proc.stdout.read(read)
    proc.stdout.close()  # as `| head -1` does once it has its line
    err = proc.stderr.read()
    return proc.wait(timeout=60), err


def test_a_reader_that_goes_away_is_no_error(work: Workdir) -> None:
    """`runs | head -1`, `timeline RUN | head -1`, `export RUN | head -1`: the command
    stops quietly with its own status: no traceback, no "Exception ignored" at exit."""
    chatty = work.run_id("hostile:chatty", code=0)
    for args, read in (
        (("runs",), 0),
        (("runs", "--json"), 0),
        (("timeline", chatty), 100),
        (("timeline", chatty, "--json"), 100),
        (("export", chatty), 100),
        (("context", chatty), 0),
    ):
        code, err = _closed_reader(work, *args, read=read)
        assert (code, err) == (0, b""), (args, code, err)


def test_a_run_keeps_its_exit_status_when_its_reader_goes_away(work: Workdir) -> None:
    """The status of run and answer is the run's, whether or not anyone reads the output."""
    assert _closed_reader(work, "run", "agents:asker", "--run-id", "gone1") == (3, b"")
    assert _closed_reader(work, "answer", "gone1", "yes") == (0, b"")
    assert _closed_reader(work, "run", "agents:failing") == (4, b"")


# --- what a terminal shows --------------------------------------------------------------


def test_recorded_control_characters_are_shown_escaped(
    work: Workdir, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent name, tool name, argument, checkpoint, question and output that hold ESC,
    CR and BEL print as \\x1b, \\r and \\x07 in every text view, never raw."""
    r = cli(work, "run", "hostile:evil", "--run-id", "evil1", capsys=capsys)
    assert r.code == 3
    outputs = [r.out]
    for args in (
        ["runs"],
        ["show", "evil1"],
        ["timeline", "evil1"],
        ["checkpoints", "evil1"],
        ["context", "evil1"],
        ["state", "evil1"],
    ):
        shown = cli(work, *args, capsys=capsys)
        assert shown.code == 0, (args, shown)
        outputs.append(shown.out)
    r = cli(work, "answer", "evil1", "yes" + EVIL, capsys=capsys)
    assert r.code == 0
    outputs.append(r.out)
    outputs.append(cli(work, "timeline", "evil1", capsys=capsys).out)
    for out in outputs:
        for raw in RAW:
            assert raw not in out, (raw, out)
    text = "".join(outputs)
    for name in ("hostile:evil", "shout", "mark", "question"):
        assert name + "\\x1b[2J\\r\\x07" in text, name
    assert "question\\x1b[2J\\r\\x07" in outputs[2]  # show: what the run waits on
    assert "mark\\x1b[2J\\r\\x07" in outputs[4]  # checkpoints


def test_json_output_keeps_the_values_exact(
    work: Workdir, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json is for machines: the JSON encoder escapes control characters, and the
    decoded values are the recorded ones, unchanged."""
    assert cli(work, "run", "hostile:evil", "--run-id", "evil2", capsys=capsys).code == 3
    r = cli(work, "checkpoints", "evil2", "--json", capsys=capsys)
    assert "\x1b" not in r.out and r.json()[0]["name"] == "mark" + EVIL


def test_error_lines_escape_control_characters(work: Workdir) -> None:
    """An error message that carries control characters (an agent module that fails to
    import) reaches stderr as one escaped line."""
    (work.path / "broken.py").write_text(f"raise RuntimeError('boom' + {EVIL!r})\n")
    r = work.cli("run", "broken:agent")
    one_line_error(r, "boom\\x1b[2J\\r\\x07")
    for raw in RAW:
        assert raw not in r.err
