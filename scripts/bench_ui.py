#!/usr/bin/env python
"""Measure the web UI on a 20,000-event run: the page's server time and its time to first
paint in headless chromium (median of ``--repeat`` loads), and take the docs' screenshots.

Usage::

    python scripts/bench_ui.py                  # 20,000 events, 5 loads, prints the figures
    python scripts/bench_ui.py --calls 500 --screenshots docs/images
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvicorn
from playwright.sync_api import sync_playwright
from starlette.testclient import TestClient

from engine import Engine
from replay.ui import app
from tests.agents import ui_agents

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARGS += ["--disable-component-update", "--disable-sync", "--no-first-run"]

bench = Engine.open()


@bench.tool
def step(i: int) -> int:
    return i


@bench.agent
def long_run(run: Any, n: int) -> int:
    """Two events a call: ``n`` calls make a run of about ``2 n`` events."""
    for i in range(n):
        step(i)
    return n


def serve(engine: Engine) -> tuple[str, uvicorn.Server]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(app(engine), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def server_times(engine: Engine, path: str, repeat: int, cold: bool) -> list[float]:
    """The page's time in the app, each load on a fresh app (``cold``: the story told
    afresh) or on one app (the story of the run at its position kept)."""
    client = TestClient(app(engine))
    client.get(path)
    times = []
    for _ in range(repeat):
        if cold:
            client = TestClient(app(engine))
        start = time.perf_counter()
        assert client.get(path).status_code == 200
        times.append(time.perf_counter() - start)
    return times


def paints(base: str, path: str, repeat: int, shots: Path | None, rid: str) -> list[float]:
    """Seconds from each load's request to its first paint in chromium; screenshots of
    the board, a paused run and the stats into ``shots``."""
    found = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for _ in range(repeat):
            # from the request to the first frame painted after the document loaded
            start = time.perf_counter()
            page.goto(base + path, wait_until="load")
            page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            found.append(time.perf_counter() - start)
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            for name, where in [("board", "/"), ("run", f"/runs/{rid}"), ("stats", "/stats")]:
                page.goto(base + where, wait_until="load")
                page.screenshot(path=str(shots / f"ui-{name}.png"))
        browser.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=6)
    parser.add_argument("--screenshots", type=Path)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        engine = Engine.open(f"sqlite:///{d}/ui.db")
        started = time.perf_counter()
        big = engine.run(long_run, n=options.calls).run_id
        built = time.perf_counter() - started
        asked = engine.run(ui_agents.asker, order="o-1042").run_id
        engine.run(ui_agents.stocker, order="o-1043")
        events = engine.state(big).position
        print(f"a run of {events} events, written in {built:.1f}s")
        for cold in (True, False):
            server = server_times(engine, f"/runs/{big}", options.repeat, cold)
            print(
                f"server, {'first open' if cold else 'again (kept story)'}: GET /runs/{{id}} "
                f"median {statistics.median(server) * 1000:.0f} ms"
            )
        base, uv = serve(engine)
        try:
            fcp = paints(base, f"/runs/{big}", options.repeat, options.screenshots, asked)
        finally:
            uv.should_exit = True
        print(
            f"chromium: first paint {fcp[0] * 1000:.0f} ms at the first open, "
            f"then median {statistics.median(fcp[1:]) * 1000:.0f} ms"
        )
        engine.close()


if __name__ == "__main__":
    main()
