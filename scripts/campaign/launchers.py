"""Launching children: a fresh interpreter each, or forks of a preloaded zygote."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .child import child

SCRIPT = Path(__file__).resolve().parents[1] / "crash_campaign.py"  # its --child, --zygote
ROOT = SCRIPT.parents[1]


class Launcher:
    """Starts child steps and reports how they ended (``-9``: killed by SIGKILL)."""

    startup = 0.0  # seconds before a child starts working (where a timer kill is wasted)

    def start(self, args: list[str], failpoint: str | None) -> Any:
        raise NotImplementedError

    def wait(self, child: Any, timeout: float) -> int | None:
        """The child's exit code, or None if it still runs after ``timeout`` seconds."""
        raise NotImplementedError

    def kill(self, child: Any) -> None:
        raise NotImplementedError

    def finish(self, child: Any) -> tuple[int, str]:
        """Wait for the child's end: ``(exit code, stderr)``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class SpawnLauncher(Launcher):
    """``python crash_campaign.py --child ...``: a new interpreter per step (slow start)."""

    startup = 0.12

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def start(self, args: list[str], failpoint: str | None) -> subprocess.Popen[str]:
        env = dict(self.env)
        if failpoint:
            env["AGENTLOG_FAILPOINTS"] = failpoint
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), "--child", *args],
            cwd=str(ROOT),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self, child: subprocess.Popen[str], timeout: float) -> int | None:
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, child: subprocess.Popen[str]) -> None:
        child.kill()  # Popen has not reaped it: the pid is still this child's

    def finish(self, child: subprocess.Popen[str]) -> tuple[int, str]:
        _, err = child.communicate(timeout=300)
        return child.returncode, err


class ForkLauncher(Launcher):
    """Children forked from a zygote process that has imported the engine (but opened no
    store and imported no agent): each step is still a process of its own, killed for
    real, without paying for an interpreter start."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.workdir = workdir
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--zygote"],
            cwd=str(ROOT),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        self.n = 0
        self._line(120)  # "ready"

    def _line(self, timeout: float | None) -> dict[str, Any] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise RuntimeError("the zygote died")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def start(self, args: list[str], failpoint: str | None) -> dict[str, Any]:
        self.n += 1
        err = str(self.workdir / f"child-{self.n % 8}.err")
        self._send({"args": args, "failpoint": failpoint, "stderr": err})
        started = self._line(120)
        assert started is not None
        return {"pid": started["pid"], "stderr": err, "code": None}

    def wait(self, child: dict[str, Any], timeout: float) -> int | None:
        if child["code"] is None:
            done = self._line(timeout)
            if done is not None:
                child["code"] = done["code"]
        return child["code"]  # type: ignore[no-any-return]

    def kill(self, child: dict[str, Any]) -> None:
        # The zygote reaps a child only when told to (after its status was read), so
        # this pid cannot have been reused by another process.
        os.kill(child["pid"], signal.SIGKILL)

    def finish(self, child: dict[str, Any]) -> tuple[int, str]:
        code = self.wait(child, 300)
        if code is None:
            raise RuntimeError(f"child {child['pid']} did not finish")
        self._send({"reap": child["pid"]})  # before the next step: a lease's owner is gone
        reaped = self._line(120)
        assert reaped is not None and reaped.get("reaped") == child["pid"]
        return code, Path(child["stderr"]).read_text(errors="replace")

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def zygote() -> int:
    """Read child steps on stdin; fork one process per step; report its pid, then how it
    ended (without reaping it, so its pid stays its own), then reap it when told. The
    engine is imported here once; no store is opened and no agent imported."""
    import traceback

    import engine  # noqa: F401 - preloaded for the children
    from engine import failpoints

    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    while raw := sys.stdin.buffer.readline():
        msg = json.loads(raw)
        pid = os.fork()
        if pid == 0:  # the child: one step, then exit without running the zygote's code
            code = 1
            try:
                fd = os.open(msg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 2)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.environ.pop("AGENTLOG_FAILPOINTS", None)
                if msg["failpoint"]:
                    os.environ["AGENTLOG_FAILPOINTS"] = msg["failpoint"]
                failpoints.reset()
                code = child(msg["args"])
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        out.write(json.dumps({"pid": pid}).encode() + b"\n")
        out.flush()
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert info is not None
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        code = -info.si_status if killed else info.si_status
        out.write(json.dumps({"pid": pid, "code": code}).encode() + b"\n")
        out.flush()
        assert json.loads(sys.stdin.buffer.readline())["reap"] == pid
        os.waitpid(pid, 0)
        out.write(json.dumps({"reaped": pid}).encode() + b"\n")
        out.flush()
    return 0
