"""Worker processes (campaign/workerproc.py) that a campaign or a test starts, kills
(SIGKILL, reaped at once so that its pid is seen gone), stops (SIGSTOP) and continues,
and finally drains (SIGTERM), each in a slot of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .launchers import ROOT

WORKERPROC = Path(__file__).resolve().with_name("workerproc.py")
DRAIN_PATIENCE = 120.0  # seconds a draining worker may take before it is killed (reported)


@dataclass
class Proc:
    """One worker process: its slot, its Popen, and once it serves its owner id."""

    slot: int
    popen: subprocess.Popen[str]
    err: Path
    id: str | None = None
    stopped: bool = False
    termed: bool = False
    serving: threading.Event = field(default_factory=threading.Event)
    lines: list[dict[str, object]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def said(self, key: str) -> bool:
        """Whether the worker printed a line with ``key`` (``draining``, ``stopped``)."""
        return any(key in line for line in list(self.lines))

    def stderr_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.err.read_text(errors="replace")[-chars:]
        return ""


class Fleet:
    """Worker processes on ``url`` serving the agents of ``module``, by slot."""

    def __init__(
        self,
        url: str,
        module: str,
        env: dict[str, str],
        workdir: Path,
        *,
        queues: str = "default",
        concurrency: int = 4,
        grace: float = 30.0,
    ) -> None:
        self.args = [
            *(sys.executable, str(WORKERPROC), url, module, "--queues", queues),
            *("--concurrency", str(concurrency), "--grace", str(grace)),
        ]
        path = os.pathsep.join(
            p for p in (str(ROOT), str(ROOT / "scripts"), os.environ.get("PYTHONPATH", "")) if p
        )
        self.env = {**os.environ, **env, "PYTHONPATH": path}
        self.env.pop("AGENTLOG_FAILPOINTS", None)
        self.workdir = workdir
        self.procs: dict[int, Proc] = {}
        self.started = 0

    def start(self, slot: int) -> Proc:
        """A new worker process in ``slot`` (its id is read as it prints it)."""
        self.started += 1
        err = self.workdir / f"worker-{slot}-{self.started}.err"
        with err.open("w") as sink:
            popen = subprocess.Popen(
                self.args,
                cwd=str(ROOT),
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=sink,
                text=True,
            )
        proc = Proc(slot, popen, err)
        threading.Thread(target=_read, args=(proc,), daemon=True).start()
        self.procs[slot] = proc
        return proc

    def kill(self, slot: int, before_reap: object = None) -> Proc:
        """SIGKILL the slot's worker; ``before_reap()`` (if given) runs while it is a
        zombie (dead, its pid still taken: no other worker can tell it is gone yet);
        then it is reaped and the slot is empty."""
        proc = self.procs.pop(slot)
        proc.popen.send_signal(signal.SIGKILL)
        if callable(before_reap):
            before_reap()
        proc.popen.wait()
        return proc

    def stop(self, slot: int) -> Proc:
        proc = self.procs[slot]
        proc.popen.send_signal(signal.SIGSTOP)
        proc.stopped = True
        return proc

    def cont(self, slot: int) -> Proc:
        proc = self.procs[slot]
        proc.popen.send_signal(signal.SIGCONT)
        proc.stopped = False
        return proc

    def term(self, slot: int, patience: float = DRAIN_PATIENCE) -> Proc:
        """SIGTERM the slot's worker once it serves (its handler installed by then):
        it drains; it stays in its slot until ``drain`` reaps it."""
        proc = self.procs[slot]
        if proc.stopped:
            self.cont(slot)
        proc.serving.wait(patience)
        proc.popen.send_signal(signal.SIGTERM)
        proc.termed = True
        return proc

    def drain(self, slot: int, patience: float = DRAIN_PATIENCE) -> int:
        """SIGTERM the slot's worker (unless ``term`` did) and wait for its exit code
        (killed past ``patience``: -9); the slot is empty after."""
        proc = self.procs[slot]
        if not proc.termed:
            self.term(slot, patience)
        del self.procs[slot]
        try:
            return proc.popen.wait(timeout=patience)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait()
            return -signal.SIGKILL

    def close(self) -> dict[int, int]:
        """Drain every worker left: their exit codes by slot."""
        return {slot: self.drain(slot) for slot in sorted(self.procs)}


def _read(proc: Proc) -> None:
    """The worker's stdout lines, as they come: its id first."""
    assert proc.popen.stdout is not None
    for line in proc.popen.stdout:
        with contextlib.suppress(ValueError):
            msg = json.loads(line)
            proc.lines.append(msg)
            if "worker" in msg:
                proc.id = str(msg["worker"])
                proc.serving.set()
