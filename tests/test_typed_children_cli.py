"""``agentlog answer`` to a typed question (``run.ask(question, returns=T)``), in real
subprocesses on SQLite and PostgreSQL: text or JSON (``--json-value``) that does not fit
``T`` exits 2 with one line and records nothing; a fitting answer reaches the agent as
``T`` (a child's question too, answered through its parent, whose output is typed)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import backends
from test_cli_kit import Workdir, one_line_error

ROOT = Path(__file__).resolve().parents[1]

AGENTS = """
import datetime as dt
import enum

import msgspec

from engine import Engine

engine = Engine.open()


class Size(enum.Enum):
    S = "s"
    L = "l"


class Shipment(msgspec.Struct):
    day: dt.date
    size: Size


@engine.agent
def shipper(run) -> Shipment:
    when = run.ask("when?", returns=dt.date)
    assert type(when) is dt.date, when
    size = run.ask("size?", returns=Size)
    assert type(size) is Size, size
    return Shipment(when + dt.timedelta(days=1), size)


@engine.agent
def office(run) -> dict:
    shipment = run.call(shipper)
    assert type(shipment) is Shipment, shipment  # the child's declared type
    return {"ships": shipment.day.isoformat(), "size": shipment.size.value}
"""


def _work(tmp_path: Path, url: str) -> Workdir:
    (tmp_path / "agents.py").write_text(AGENTS)
    return Workdir(tmp_path, url)


def _env() -> dict[str, str]:
    """The CLI imports this worktree's engine (not another checkout's)."""
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@backends("sqlite", "postgres")
def test_cli_answers_to_typed_questions_are_checked_and_typed(
    store_url: str, tmp_path: Path
) -> None:
    work = _work(tmp_path, store_url)
    started = work.cli("run", "agents:office", "--json", env=_env())
    assert started.code == 3, started
    parent = started.json()["run_id"]
    events = len(work.cli("timeline", parent, "--json", env=_env()).json())
    bad = work.cli("answer", parent, "next tuesday", env=_env())
    one_line_error(bad, "does not fit", "date")
    assert len(work.cli("timeline", parent, "--json", env=_env()).json()) == events
    r = work.cli("answer", parent, "2026-12-24", "--json", env=_env())
    assert r.code == 3 and r.json()["status"] == "paused", r  # now asks the size
    one_line_error(work.cli("answer", parent, "--json-value", '"XL"', env=_env()), "Size")
    done = work.cli("answer", parent, "--json-value", '"l"', "--json", env=_env())
    assert done.code == 0, done
    assert done.json()["output"] == {"ships": "2026-12-25", "size": "l"}
