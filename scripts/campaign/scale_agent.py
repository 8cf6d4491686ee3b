"""The scale test's agents (scripts/bench_tree.py): a parent spawning ``children``
workers, each making ``calls`` tool calls. A module, so that every recover process
imports it by name."""

from __future__ import annotations

from typing import Any

from engine import Engine

engine = Engine.open()  # $AGENTLOG_URL


@engine.tool
def work(child: int, call: int) -> int:
    return child * 1000 + call


@engine.agent
def worker(run: Any, index: int, calls: int) -> int:
    return sum(work(index, c) for c in range(calls))


@engine.agent
def parent(run: Any, children: int, calls: int) -> int:
    kids = [run.spawn(worker, index=i, calls=calls) for i in range(children)]
    return sum(run.gather(*kids))
