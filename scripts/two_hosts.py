"""Two hosts and a cut link: a worker in a network namespace of its own loses the network
mid-run, and the run continues on the other host without a duplicated or lost effect.

Built from the machine's own parts (needs root, ``ip`` from iproute2, PostgreSQL's
``initdb``/``pg_ctl`` and a ``postgres`` system user):

- a veth pair between this namespace ("host A") and a new one ("host B");
- a PostgreSQL cluster of the script's own, listening on host A's veth address;
- a counting HTTP service on that address that performs each idempotency key once and
  counts every request;
- worker B (``agentlog worker`` inside the namespace) claims a run of keyed side effects;
  mid-run the link is cut; worker A starts on host A, takes the run over once B's lease
  expires, and completes it; then the link comes back and B, still running, must write
  nothing more for it.

    sudo python scripts/two_hosts.py            # prints a JSON report; exit 1 on damage

``tests/runtime/workers/test_two_hosts.py`` runs it (and skips where namespaces cannot be
made).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from campaign.httpd import QuietHandler, Served  # noqa: E402

LEASE_TTL = 2.0


def sh(*cmd: str, ns: str | None = None) -> None:
    full = ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)
    subprocess.run(full, check=True, capture_output=True)


def can_run() -> str | None:
    """Why this machine cannot run the test, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "initdb", "pg_ctl", "runuser"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"agp{secrets.token_hex(3)}"
    try:
        sh("ip", "netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as e:
        return f"cannot create a network namespace: {e}"
    sh("ip", "netns", "del", probe)
    return None


class Net:
    """Host B's namespace and the veth pair; ``cut()`` and ``mend()`` the link."""

    def __init__(self) -> None:
        tag = secrets.token_hex(2)
        self.ns, self.a, self.b = f"agl{tag}", f"agv{tag}a", f"agv{tag}b"
        net = 100 + int(tag, 16) % 100
        self.host_a, self.host_b = f"10.{net}.7.1", f"10.{net}.7.2"

    def __enter__(self) -> Net:
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.a, "type", "veth", "peer", "name", self.b)
        sh("ip", "link", "set", self.b, "netns", self.ns)
        sh("ip", "addr", "add", f"{self.host_a}/24", "dev", self.a)
        sh("ip", "link", "set", self.a, "up")
        sh("ip", "addr", "add", f"{self.host_b}/24", "dev", self.b, ns=self.ns)
        sh("ip", "link", "set", self.b, "up", ns=self.ns)
        sh("ip", "link", "set", "lo", "up", ns=self.ns)
        return self

    def cut(self) -> None:
        sh("ip", "link", "set", self.a, "down")

    def mend(self) -> None:
        sh("ip", "link", "set", self.a, "up")

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "link", "del", self.a], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


@contextmanager
def cluster(address: str) -> Iterator[str]:
    """A PostgreSQL cluster of our own on ``address``; its URL."""
    root = tempfile.mkdtemp(prefix="agentlog-2hosts-")
    os.chmod(root, 0o755)
    data = os.path.join(root, "data")
    os.mkdir(data)
    shutil.chown(data, "postgres", "postgres")
    port = 20000 + secrets.randbelow(20000)
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, "initdb", "-A", "trust", "-D", data], check=True, capture_output=True)
    with open(os.path.join(data, "pg_hba.conf"), "a") as f:
        f.write("host all all 10.0.0.0/8 trust\n")
    opts = f"-p {port} -c listen_addresses={address} -c unix_socket_directories={data}"
    log = os.path.join(data, "server.log")
    start = [*as_pg, "pg_ctl", "-D", data, "-l", log, "-o", opts, "-w", "start"]
    subprocess.run(start, check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@{address}:{port}/postgres"
    finally:
        stop = [*as_pg, "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]
        subprocess.run(stop, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


class Effects:
    """The counting service: performs each key once; counts every request per key."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.performed: Counter[int] = Counter()
        self.lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        books = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with books.lock:
                    books.requests[body["key"]] += 1
                    if books.requests[body["key"]] == 1:
                        books.performed[int(body["step"])] += 1
                    n = books.performed[int(body["step"])]
                data = json.dumps({"performed": n}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def worker(url: str, effects_url: str, ns: str | None, log: Any) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "AGENTLOG_URL": url,
        "AGENTLOG_EFFECTS_URL": effects_url,
        "AGENTLOG_LOG": "json",
        "AGENTLOG_LOG_LEVEL": "info",
    }
    cmd = [sys.executable, "-m", "replay", "worker", "--import", "campaign.twohosts_agent"]
    cmd += ["--lease-ttl", str(LEASE_TTL), "--grace", "1", "--concurrency", "2"]
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=log)


def scenario(steps: int = 8, gap: float = 0.4) -> dict[str, Any]:
    """Run the scenario once; the report (``damage`` True if anything was lost, sent
    twice or written by the cut-off worker after the link came back)."""
    logs = tempfile.mkdtemp(prefix="agentlog-2hosts-logs-")
    effects = Effects()
    with (
        Net() as net,
        cluster(net.host_a) as url,
        open(os.path.join(logs, "b.log"), "wb") as b_log,
        open(os.path.join(logs, "a.log"), "wb") as a_log,
    ):
        served = Served(effects.handler(), host=net.host_a)
        try:
            seen = _drive(net, url, served.url, effects, (a_log, b_log), steps, gap)
        finally:
            served.close()
    with open(os.path.join(logs, "b.log"), encoding="utf-8", errors="replace") as f:
        stopped = [json.loads(line)["reason"] for line in f if '"run_stopped"' in line]
    lost = [n for n in range(steps) if effects.performed[n] == 0]
    twice = [n for n in range(steps) if effects.performed[n] > 1]
    report = {
        **seen,
        "lost_effects": len(lost),
        "duplicated_effects": len(twice),
        "requests_per_key_max": max(effects.requests.values(), default=0),
        "b_stopped": stopped,  # B's own account: its write after the cut refused
        "logs": logs,
    }
    report["damage"] = bool(
        lost or twice or seen["written_after_the_link_came_back"] or seen["output"] != steps
    )
    return report


def _drive(
    net: Net,
    url: str,
    effects_url: str,
    effects: Effects,
    logs: tuple[Any, Any],
    steps: int,
    gap: float,
) -> dict[str, Any]:
    """B starts the run, the link is cut, A finishes it, the link comes back."""
    from campaign import twohosts_agent

    from engine import Engine, EngineConfig

    engine = Engine(url, config=EngineConfig(lease_ttl=LEASE_TTL))
    b = worker(url, effects_url, net.ns, logs[1])
    h = engine.enqueue(twohosts_agent.job, steps=steps, gap=gap)
    while sum(effects.performed.values()) < steps // 3:  # B is well into the run
        time.sleep(0.05)
    net.cut()
    cut_at = time.time()
    a = worker(url, effects_url, None, logs[0])
    result = engine.wait(h.run_id, timeout=120)
    continued = _taken_over_at(engine, h.run_id)
    net.mend()
    time.sleep(LEASE_TTL * 3)  # B's stuck connections come back: it must write nothing
    positions = len(engine.events(h.run_id))
    for p in (a, b):
        p.send_signal(signal.SIGTERM)
    for p in (a, b):
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    seen = {
        "status": str(result.status),
        "output": result.output,
        "written_after_the_link_came_back": len(engine.events(h.run_id)) - positions,
        "verify": str(engine.verify(h.run_id).status),
        "seconds_from_cut_to_takeover": None if continued is None else continued - cut_at,
    }
    engine.close()
    return seen


def _taken_over_at(engine: Any, run_id: str) -> float | None:
    """When the run was resumed by another owner (its last ``agent_resumed``)."""
    resumed = [e for e in engine.events(run_id) if e.type == "agent_resumed"]
    return resumed[-1].at.timestamp() if resumed else None


def main() -> int:
    why = can_run()
    if why is not None:
        print(json.dumps({"skipped": why}))
        return 0
    report = scenario()
    print(json.dumps(report, indent=2))
    return 1 if report["damage"] else 0


if __name__ == "__main__":
    sys.exit(main())
