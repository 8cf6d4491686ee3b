"""Shared helpers for the CLI tests (no tests here): run ``agentlog`` in a real subprocess
in a working directory that holds a small agents module; ``Workdir.many`` runs a list of
commands one after another in one such process (a Python start for all of them)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AGENTS = """
from pathlib import Path

from engine import Engine, Permanent

engine = Engine.open()


@engine.tool
def greet(name: str) -> str:
    return f"hello {name}"


@engine.agent
def hello(run, name: str = "world"):
    run.plan(["greet", "close"])
    with run.step("greet"):
        greeting = greet(name)
    run.checkpoint("greeted")
    with run.step("close"):
        closing = run.decide("closing", lambda: "bye")
    return {"greeting": greeting, "closing": closing}


@engine.agent
def asker(run):
    plan = run.decide("plan", lambda: "a")
    run.checkpoint("planned")
    return {"answer": run.ask("approve?"), "plan": plan}


@engine.tool
def broken():
    raise Permanent("no permission")


@engine.agent
def failing(run):
    return broken()


def undo(receipt):
    with open("undone.txt", "a") as f:
        f.write(receipt["item"] + "\\n")
    return {"undone": receipt["item"]}


@engine.tool(side_effect=True, compensate=undo)
def book(item: str, *, idempotency_key: str) -> dict:
    return {"item": item, "key": idempotency_key}


@engine.agent
def booker(run):
    hotel = book("hotel")
    flight = book("flight")
    return {"confirmed": run.ask("confirm?"), "hotel": hotel, "flight": flight}


@engine.agent
def crasher(run):
    return {"a": greet("a"), "b": greet("b")}


@engine.agent
def weird(run):
    big = 2**63 - 1
    return {"bytes": b"\\x00\\xff", 7: "int key", "float": 0.1, "big": big, "nan": float("nan")}
"""


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Workdir:
    """A directory with ``agents.py`` and a store URL; ``cli`` runs agentlog there."""

    path: Path
    url: str

    def cli(self, *args: str, env: dict[str, str] | None = None, url: bool = True) -> Result:
        argv = [*args, "--url", self.url] if url else list(args)
        return agentlog(*argv, cwd=self.path, env=env)

    def ok(self, *args: str, code: int = 0) -> Result:
        r = self.cli(*args)
        assert r.code == code, (args, r)
        return r

    def many(self, argvs: list[list[str]], env: dict[str, str] | None = None) -> list[Result]:
        """Each of ``argvs`` run in turn in one fresh ``agentlog`` process (``--url`` added),
        its exit status and what it wrote to the process's stdout and stderr (file
        descriptors 1 and 2, as a process of its own would show them)."""
        argvs = [[*argv, "--url", self.url] for argv in argvs]
        return agentlog_many(argvs, cwd=self.path, env=env)

    def run_id(self, *args: str, code: int) -> str:
        run_id: str = self.ok("run", *args, "--json", code=code).json()["run_id"]
        return run_id


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AGENTLOG_URL", "AGENTLOG_FAILPOINTS", "NO_COLOR", "FORCE_COLOR")
    }
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


def agentlog(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: bytes = b""
) -> Result:
    """``python -m replay.cli ARGS`` in ``cwd``; never raises on a non-zero status."""
    proc = subprocess.run(
        [sys.executable, "-m", "replay.cli", *args],
        cwd=cwd,
        env=clean_env(env),
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


MANY = """
import json, os, sys, tempfile
from engine import observe
from replay.cli.entry import run_cli

observe.configure()
results = []
for argv in json.loads(sys.stdin.read()):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            try:
                code = run_cli(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out.seek(0)
        err.seek(0)
        results.append([code, out.read().decode(), err.read().decode()])
sys.stdout.write(json.dumps(results))
"""


def agentlog_many(
    argvs: list[list[str]], *, cwd: Path, env: dict[str, str] | None = None
) -> list[Result]:
    """Each of ``argvs`` run by ``run_cli`` in turn, in one ``python`` process in ``cwd``
    (logging configured as ``agentlog`` does): the results, in order."""
    proc = subprocess.run(
        [sys.executable, "-c", MANY],
        cwd=cwd,
        env=clean_env(env),
        input=json.dumps(argvs).encode(),
        capture_output=True,
        timeout=60 + 10 * len(argvs),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return [Result(code, out, err) for code, out, err in json.loads(proc.stdout)]


def make_workdir(tmp_path: Path, url: str) -> Workdir:
    """``tmp_path`` with the test agents module, on the store at ``url``."""
    (tmp_path / "agents.py").write_text(AGENTS)
    return Workdir(tmp_path, url)


def sqlite_url(tmp_path: Path, name: str = "agentlog.db") -> str:
    return f"sqlite:///{tmp_path}/{name}"


def one_line_error(r: Result, *needles: str) -> None:
    """Exit 2 with one clear line (three at most) on stderr and no traceback."""
    assert r.code == 2, r
    lines = r.err.strip().splitlines()
    assert 1 <= len(lines) <= 3, r.err
    assert "Traceback" not in r.err, r.err
    for needle in needles:
        assert needle in r.err, (needle, r.err)


@contextlib.contextmanager
def serving(
    work: Workdir, *args: str, says: str, stopped: int, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``agentlog ARGS --url URL`` serving in a real process, its first line starting with
    ``says``: the process and that line; on leaving, Ctrl-C must stop it with ``stopped``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay.cli", *args, "--url", work.url],
        cwd=work.path,
        env=clean_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith(says), line
        yield proc, line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
