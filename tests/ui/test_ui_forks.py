"""The run page's fork and message actions in-process: a fork with edits (``set``: NAME=JSON
lines), with another answer, as a dry run, and a message sent to a waiting run; each a POST
with the CSRF value, its values read as the CLI reads them (a bad one: a 400 of one line,
nothing recorded)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import backends, engine_with
from ui_kit import client, csrf, main_text

from engine import Engine
from engine.kinds import RunStatus
from replay.forkdoc import fork_doc
from tests.agents import mailbox_agents, ui_agents


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    """No inline wait: a run waiting on a message returns at once."""
    yield from engine_with(store_url, inline_wait=0)


def paused(eng: Engine, order: str = "f1") -> str:
    return eng.run(ui_agents.asker, order=order).run_id


def fork_of(eng: Engine, rid: str, form: dict[str, str]) -> str:
    c = client(eng)
    r = c.post(f"/runs/{rid}/rewind", data={**form, "csrf": csrf(c)}, follow_redirects=False)
    assert r.status_code == 303, main_text(r.text)
    fork = r.headers["location"].rsplit("/", 1)[1]
    assert fork != rid and eng.state(fork).parent_run_id == rid
    return fork


@backends("sqlite", "postgres")
def test_a_fork_with_edits_replaces_the_inherited_value(eng: Engine) -> None:
    rid = paused(eng)
    fork = fork_of(eng, rid, {"to": "charged", "set": 'look="seen as text"\n\n'})
    assert eng.state(fork).status == RunStatus.PAUSED  # it asks again, as the parent did
    edits = fork_doc(eng.events(fork))["edits"]
    assert [e["name"] for e in edits] == ["look"]
    eng.answer(fork, "no")
    assert eng.state(fork).output["seen"] == "seen as text"
    page = client(eng).get(f"/runs/{fork}").text
    assert 'id="fork-edits"' in page and "look" in page


def test_a_fork_with_another_answer_continues_with_it(eng: Engine) -> None:
    rid = paused(eng)
    fork = fork_of(eng, rid, {"answer": '"no"', "answer_json": "1"})
    state = eng.state(fork)
    assert state.status == RunStatus.COMPLETED and state.output["answer"] == "no"
    assert eng.state(rid).status == RunStatus.PAUSED  # the parent is left as it was


def test_a_dry_run_fork_sends_nothing_and_its_page_says_what_it_would(eng: Engine) -> None:
    rid = paused(eng, "dry")
    fork = fork_of(eng, rid, {"to": "charged", "answer": "yes", "dry_run": "1"})
    assert eng.state(fork).status == RunStatus.DRY_RUN
    would = fork_doc(eng.events(fork))["would_send"]
    assert [w["tool"] for w in would] == ["ship"]
    page = client(eng).get(f"/runs/{fork}").text
    assert 'id="dry-run"' in page and 'id="would-send"' in page and "ship" in page


def test_fork_values_are_read_as_the_cli_reads_them(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    base = {"to": "charged", "csrf": csrf(c)}
    for bad, says in [
        ({"set": "look"}, "takes NAME=JSON"),
        ({"set": "look=1\nlook=2"}, "twice"),
        ({"set": "look={"}, "not valid JSON"),
        ({"set": f"look={10**30}"}, "beyond 64 bits"),
        ({"set": "nobody=1"}, "nobody"),
        ({"answer": "NaN", "answer_json": "1"}, "not a finite number"),
        ({"to": "", "answer": ""}, "give a position"),
        ({"set": "x=" + "1" * 100_001}, "longer than"),
    ]:
        r = c.post(f"/runs/{rid}/rewind", data={**base, **bad})
        assert r.status_code == 400 and says in main_text(r.text), bad
        assert "Traceback" not in r.text
    fetched = c.post(
        f"/runs/{rid}/rewind", data={**base, "set": "look"}, headers={"X-Agentlog-Fetch": "1"}
    )
    assert fetched.status_code == 400 and "NAME=JSON" in fetched.json()["error"]
    assert eng.store.children(rid) == []  # no refused fork was made


def test_a_fork_needs_the_csrf_value(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    csrf(c)
    r = c.post(f"/runs/{rid}/rewind", data={"to": "charged", "dry_run": "1"})
    assert r.status_code == 403
    assert eng.store.children(rid) == []


@backends("sqlite", "postgres")
def test_a_message_sent_from_the_page_reaches_the_waiting_run(eng: Engine) -> None:
    rid = eng.run(mailbox_agents.receiver, topic="go").run_id
    assert eng.state(rid).status == RunStatus.WAITING
    c = client(eng)
    assert 'id="send-form"' in c.get(f"/runs/{rid}").text
    form = {"topic": "go", "value": '{"n": 1}', "as_json": "1", "csrf": csrf(c)}
    r = c.post(f"/runs/{rid}/send", data=form, headers={"X-Agentlog-Fetch": "1"})
    assert r.status_code == 200 and r.json()["sent"] is True
    assert r.json()["location"] == f"/runs/{rid}"
    # the UI's engine defines no agent: a worker wakes the run; here, a resume
    assert eng.resume(rid).output == [{"n": 1}]


def test_a_bad_message_is_refused_and_nothing_is_sent(eng: Engine) -> None:
    rid = eng.run(mailbox_agents.receiver, topic="go").run_id
    c = client(eng)
    token = csrf(c)
    for bad, says in [
        ({"topic": "", "value": "x"}, "topic"),
        ({"topic": "go", "value": "{", "as_json": "1"}, "not valid JSON"),
        ({"topic": "go\x07", "value": "x"}, "topic"),
        ({"topic": "go", "value": "x" * 100_001}, "longer than"),
    ]:
        r = c.post(f"/runs/{rid}/send", data={**bad, "csrf": token})
        assert r.status_code == 400 and says in main_text(r.text), bad
    assert c.post(f"/runs/{rid}/send", data={"topic": "go", "value": "x"}).status_code == 403
    eng.send(rid, "go", "the first message")  # none of the refused ones came before it
    assert eng.resume(rid).output == ["the first message"]
    done = eng.run(ui_agents.stocker, order="s1").run_id
    assert 'id="send-form"' not in c.get(f"/runs/{done}").text  # an ended run takes none
