"""An owner is declared dead at once only with proof that its pid is one of our PID
namespace: its id carries the boot id and the PID-namespace inode (``host:pid:nonce:
boot.pidns``). An owner of another PID namespace on the same host (a container with host
networking), an id without the proof (written by an older version) or a /proc that is not
our namespace's waits for its lease to expire. Real processes: `recover` run under
``unshare --pid --fork`` leaves a run a live process executes alone (SQLite, PostgreSQL)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agents.kit import ROOT, log_of
from conftest import backends
from test_lifecycle_leases import BLOCKING, _dead_pid

from engine import Engine
from engine.polling import poll_until
from engine.runtime.host.leases import HOST, alive, new_owner, pid_space


def _namespace_of(*unshare: str) -> str:
    """``pid_space()`` as a process started under ``unshare`` sees it."""
    code = "from engine.runtime.host.leases import pid_space; print(pid_space())"
    p = subprocess.run(
        ["unshare", *unshare, sys.executable, "-c", code],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        check=True,
    )
    return p.stdout.strip()


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True)
    return probe.returncode == 0


needs_unshare = pytest.mark.skipif(not _can_unshare(), reason="unshare --pid is not allowed")


def test_this_process_proves_its_pid_namespace_from_proc() -> None:
    """The proof is the boot id (dashes dropped) and the inode of /proc/self/ns/pid, as
    /proc has them; a new owner id ends with it after host and pid."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip().replace("-", "")
    here = pid_space()
    assert here == f"{boot}.{os.stat('/proc/self/ns/pid').st_ino}"
    host, pid, nonce, proof = new_owner().rsplit(":", 3)
    assert (host, pid, proof) == (HOST, str(os.getpid()), here) and len(nonce) == 8


def test_a_gone_pid_is_dead_at_once_only_with_the_proof_of_our_namespace() -> None:
    """A reaped pid with our proof is dead; the same pid under an older id without the
    proof, or under another namespace's or another boot's proof, is alive (expiry
    decides); a live pid with our proof is alive."""
    here, gone = pid_space(), _dead_pid()
    boot, ns = here.split(".")
    assert not alive(f"{HOST}:{gone}:0badc0de:{here}")
    assert alive(f"{HOST}:{gone}:0badc0de")  # an id recorded before the proof existed
    assert alive(f"{HOST}:{gone}:0badc0de:")  # a process that could not prove it
    assert alive(f"{HOST}:{gone}:0badc0de:{boot}.{int(ns) + 1}")
    assert alive(f"{HOST}:{gone}:0badc0de:{'0' * 32}.{ns}")
    assert alive(f"elsewhere.example:{gone}:0badc0de:{here}")
    assert alive(f"{HOST}:{os.getpid()}:0badc0de:{here}")
    assert alive(f"{HOST}:{gone}:0badc0de:{here}", here="")  # we cannot prove ours


@needs_unshare
def test_a_process_in_another_pid_namespace_has_another_proof_or_none() -> None:
    """Under ``unshare --pid --fork --mount-proc`` the namespace inode differs (same boot);
    without --mount-proc the /proc seen is not its namespace's, so it proves nothing."""
    here = pid_space()
    inside = _namespace_of("--pid", "--fork", "--mount-proc")
    assert inside and inside != here and inside.split(".")[0] == here.split(".")[0]
    assert _namespace_of("--pid", "--fork") == ""


RECOVER = """
import json, sys
from engine import Engine
e = Engine.open(sys.argv[1])
print(json.dumps([[r.run_id, r.status] for r in e.recover()]))
"""


def _wait_for(path: Path, *procs: subprocess.Popen[str]) -> bool:
    """Whether ``path`` appears before every one of ``procs`` has exited."""
    # 120 s: a guard against a hang, not a limit tested.
    poll_until(lambda: path.exists() or all(p.poll() is not None for p in procs), 120)
    return path.exists()


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@needs_unshare
@backends("sqlite", "postgres")
@pytest.mark.parametrize("unshare", [["--pid", "--fork"], ["--pid", "--fork", "--mount-proc"]])
def test_recover_from_another_pid_namespace_leaves_a_live_run_alone(
    store_url: str, tmp_path: Path, unshare: list[str]
) -> None:
    """A process blocked inside a side-effecting tool holds its run; `recover` started under
    ``unshare`` (same host name, another PID namespace, where that pid does not exist)
    takes nothing over: it resumes no run, writes nothing, and the call is executed once."""
    (tmp_path / "blocking.py").write_text(BLOCKING)
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    owner = _start([sys.executable, "blocking.py", store_url, "gated"], env, tmp_path)
    recoverer: subprocess.Popen[str] | None = None
    try:
        assert _wait_for(tmp_path / "gate.entered", owner), owner.stderr
        (tmp_path / "gate.entered").unlink()
        e = Engine.open(store_url)
        try:
            before = log_of(e, "gated")
            cmd = ["unshare", *unshare, sys.executable, "-c", RECOVER, store_url]
            recoverer = _start(cmd, env, tmp_path)
            # a recoverer that took the run over enters the gate a second time
            entered_twice = _wait_for(tmp_path / "gate.entered", recoverer)
            # Read before the gate opens: the owner's own outcome follows it. (Not entered
            # twice, the recoverer has exited: whatever it wrote is written.)
            unchanged = log_of(e, "gated") == before
            (tmp_path / "gate.open").touch()
            out, err = recoverer.communicate(timeout=120)
            assert recoverer.returncode == 0, err[-2000:]
            assert not entered_twice and json.loads(out) == []
            assert unchanged
            out, err = owner.communicate(timeout=120)
            assert owner.returncode == 0 and out.strip() == "completed", err[-2000:]
        finally:
            e.close()
    finally:
        for p in (owner, recoverer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert (tmp_path / "gate.sent").read_text().splitlines() == ["gated:1"]
