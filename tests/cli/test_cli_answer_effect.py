"""A person confirming an uncertain effect gives its result (``answer --json-value``).

A real ``agentlog run`` is SIGKILLed after the email service counted the send and before
its outcome was recorded (no key, no verifier): the run asks a person. A bare ``done`` to
a tool declared to return a dict is refused before anything is recorded (it would hand
the agent the word ``done``); a result that does not fit the declared type is refused
too; the result given with ``--json-value`` is what the agent receives, and a resume of
the completed run sends nothing. SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_kit import Workdir, one_line_error

AGENTS = """
import json
from pathlib import Path

from engine import Engine

engine = Engine.open()
SENT = Path(__file__).with_name("sent.json")


@engine.tool(side_effect=True)
def email(to: str) -> dict[str, str]:
    sent = json.loads(SENT.read_text()) if SENT.exists() else []
    SENT.write_text(json.dumps([*sent, to]))  # the service counts every send
    return {"id": "m-" + to}


@engine.agent
def notify(run, to: str = "ada"):
    receipt = email(to)
    return "sent " + receipt["id"]
"""

STORES = pytest.mark.parametrize(
    "store_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


def _sent(work: Workdir) -> list[str]:
    sent: list[str] = json.loads((work.path / "sent.json").read_text())
    return sent


@STORES
def test_a_confirmed_effect_gives_the_agent_its_result_never_the_word(
    store_url: str, tmp_path: Path
) -> None:
    """Killed between the send and its outcome, the run asks; 'done' alone is refused
    naming --json-value, a wrongly typed result is refused, both recording nothing; the
    result given is what the agent receives, and the send is counted once."""
    (tmp_path / "agents.py").write_text(AGENTS)
    work = Workdir(tmp_path, store_url)
    killed = work.cli("run", "agents:notify", env={"AGENTLOG_FAILPOINTS": "after_tool:1"})
    assert killed.code == -9, killed
    assert _sent(work) == ["ada"]
    [run] = work.ok("runs", "--json").json()
    rid = run["run_id"]
    asked = work.ok("resume", rid, code=3)
    assert "email" in asked.out, asked
    before = work.ok("timeline", rid, "--json").json()

    bare = work.cli("answer", rid, "done")
    one_line_error(bare, "email", "dict", "--json-value")
    wrong = work.cli("answer", rid, "--json-value", "[1, 2]")
    one_line_error(wrong, "email", "dict")
    assert work.ok("timeline", rid, "--json").json() == before  # nothing recorded

    done = work.ok("answer", rid, "--json-value", '{"id": "m-ada"}', "--json")
    assert (done.json()["status"], done.json()["output"]) == ("completed", "sent m-ada")
    again = work.ok("resume", rid, "--json")
    assert again.json()["output"] == "sent m-ada"
    assert _sent(work) == ["ada"]  # sent once, never re-sent
