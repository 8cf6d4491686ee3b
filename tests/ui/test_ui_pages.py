"""The UI's reading pages in-process (Starlette's TestClient): the board and its filters,
a run's page (timeline, state, tree, forks), the state at a position, a diff, the stats,
the live stream; values from the log and the URL are escaped, bad ones a 400 or 404 page."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from conftest import backends
from ui_kit import client, main_text

from engine import Engine
from replay.ui import runpage
from tests.agents import ui_agents


def paused(eng: Engine, order: str = "a1") -> str:
    return eng.run(ui_agents.asker, order=order).run_id


@backends("sqlite", "postgres")
def test_the_board_lists_runs_filtered_by_status_with_counts(eng: Engine) -> None:
    """``/`` lists every run; ``?status=paused`` only the paused ones; the counts by status."""
    waiting = paused(eng)
    done = eng.run(ui_agents.stocker, order="s1").run_id
    c = client(eng)
    everything = c.get("/")
    assert everything.status_code == 200
    assert waiting in everything.text and done in everything.text
    assert "paused 1" in everything.text and "completed 1" in everything.text
    assert '<span class="waiting">ship it?</span>' in everything.text  # what it waits on
    only = c.get("/?status=paused")
    assert waiting in only.text and done not in only.text
    by_agent = c.get("/", params={"agent": "tests.agents.ui_agents:stocker"})
    assert done in by_agent.text and waiting not in by_agent.text


def test_a_bad_filter_is_a_400_page_with_one_line(eng: Engine) -> None:
    c = client(eng)
    for query, says in [
        ("status=nope", "status must be one of"),
        ("since=yesterdayish", "neither a span"),
        ("limit=-1", "not a whole number"),
        ("agent=%00x", "not a value any run has"),
    ]:
        r = c.get(f"/?{query}")
        assert r.status_code == 400, query
        assert says in main_text(r.text), query
        assert "Traceback" not in r.text


@backends("sqlite", "postgres")
def test_a_run_page_shows_its_timeline_state_and_actions(eng: Engine) -> None:
    """Every event a line with a link to the state there; the markup a tool returned is
    text; a paused run offers the answer form, with its CSRF value."""
    rid = paused(eng)
    c = client(eng)
    r = c.get(f"/runs/{rid[:10]}")  # a unique prefix names the run, as in the CLI
    assert r.status_code == 200
    for position in range(1, eng.state(rid).position + 1):
        assert f'href="/runs/{rid}/state?at={position}"' in r.text
    assert "<script>alert" not in r.text
    assert "&lt;script&gt;alert(" in r.text
    assert 'id="answer-form"' in r.text and 'name="csrf" value="' in r.text
    assert "ship it?" in r.text


def test_the_timeline_is_filtered_by_event_type_and_paged(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = paused(eng)
    c = client(eng)
    only = c.get(f"/runs/{rid}", params={"type": "checkpoint"})
    assert only.text.count('data-type="checkpoint"') == 1
    assert 'data-type="tool_invoked"' not in only.text
    monkeypatch.setattr(runpage, "PAGE", 2)
    pages = -(-eng.state(rid).position // 2)
    first = c.get(f"/runs/{rid}?page=1")
    assert f"page 1 of {pages}" in first.text
    assert first.text.count("<li data-position=") == 2
    assert 'data-position="1"' in first.text
    last = c.get(f"/runs/{rid}")  # the last page by default: where a live run moves
    assert f"page {pages} of {pages}" in last.text


def test_an_unknown_run_is_a_404_page_and_markup_in_the_url_is_escaped(eng: Engine) -> None:
    paused(eng)
    c = client(eng)
    for path in ["/runs/nope", "/runs/nope/state?at=1", "/live?run=nope"]:
        r = c.get(path)
        assert r.status_code == 404, path
        assert "no run matches" in main_text(r.text)
    marked = c.get("/runs/%3Cscript%3Ex")  # no run id holds markup: refused as a bad value
    assert marked.status_code == 400
    assert "<script>x" not in marked.text and "&lt;script&gt;x" in marked.text
    assert "Traceback" not in marked.text
    assert c.get("/no/such/page").status_code == 404


@backends("sqlite", "postgres")
def test_the_state_page_folds_the_run_at_a_position(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    one = c.get(f"/runs/{rid}/state?at=1")
    assert one.status_code == 200
    assert '"position": 1' in unescape(one.text) and '"status": "running"' in unescape(one.text)
    now = c.get(f"/runs/{rid}/state")
    assert '"status": "paused"' in unescape(now.text)
    named = c.get(f"/runs/{rid}/state?at=charged")  # a checkpoint's name, as --at takes
    assert named.status_code == 200


def test_a_bad_position_is_a_400_page(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    end = eng.state(rid).position
    for at in ["0", str(end + 1), str(10**30), "no-such-checkpoint"]:
        r = c.get(f"/runs/{rid}/state", params={"at": at})
        assert r.status_code == 400, at
        assert "Traceback" not in r.text


def test_the_diff_page_compares_two_positions(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    assert c.get("/diff").status_code == 200  # the form alone
    r = c.get("/diff", params={"a": f"{rid}@1", "b": rid})
    assert r.status_code == 200
    assert 'id="diff"' in r.text and "status" in main_text(r.text)
    assert c.get("/diff", params={"a": "nope@1", "b": rid}).status_code == 404
    assert c.get("/diff", params={"a": f"{rid}@{10**30}", "b": rid}).status_code == 400


def test_the_stats_page_shows_failed_attempts_beside_final_failures(eng: Engine) -> None:
    """A tool that failed twice (transient) then answered: failed attempts ``transient 2``,
    no final failure, two retries."""
    eng.run(ui_agents.stocker, order="s2")
    doc: Any = eng.stats()
    tool = next(t for t in doc.tools if t.tool.endswith("flaky"))
    assert tool.attempt_failures == {"transient": 2} and tool.failures == {}
    r = client(eng).get("/stats")
    assert r.status_code == 200
    row = r.text[r.text.find("flaky") :]
    assert '<td class="attempt-failures">transient 2' in row[:600]
    assert client(eng).get("/stats?since=whenever").status_code == 400


@backends("sqlite", "postgres")
def test_the_live_stream_says_changed_when_the_run_moves(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    first = c.get(f"/live?run={rid}&once=1")
    assert first.headers["content-type"].startswith("text/event-stream")
    seen = first.text.split("data: ")[1].split()[0]
    assert seen == str(eng.state(rid).position)
    eng.answer(rid, "no")
    moved = c.get(f"/live?run={rid}&once=1&seen={seen}")
    assert moved.text.split("data: ")[1].split()[0] == str(eng.state(rid).position)
    board = c.get("/live?once=1")
    assert "event: changed" in board.text


def test_a_fork_is_listed_on_its_parents_page(eng: Engine) -> None:
    rid = paused(eng)
    fork = eng.rewind(rid, to="charged").run_id
    page = client(eng).get(f"/runs/{rid}").text
    assert 'id="forks"' in page and fork in page
    assert "fork of" in client(eng).get("/").text


def test_a_secret_input_shows_redacted_on_every_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With encryption at rest a secret-named input is kept (resume needs it); the run's
    page, its state, the diff and the board show ``<redacted>`` in its place, as the CLI."""
    from eventsourcing.cipher import AESCipher

    monkeypatch.setenv("AGENTLOG_CIPHER_KEY", AESCipher.create_key(32))
    secret = "S3CR3T-ui-input-0042"
    eng = Engine.open(f"sqlite:///{tmp_path}/sealed.db")

    @eng.agent
    def with_token(run: Any, customer: str, api_token: str) -> str:
        return str(run.ask("go?"))

    try:
        rid = eng.run(with_token, customer="c1", api_token=secret).run_id
        c = client(eng)
        for path in [f"/runs/{rid}", f"/runs/{rid}/state?at=1", f"/diff?a={rid}@1&b={rid}", "/"]:
            text = c.get(path).text
            assert secret not in text, path
        assert "&lt;redacted&gt;" in c.get(f"/runs/{rid}/state").text
    finally:
        eng.close()


@backends("sqlite", "postgres")
def test_the_news_of_an_append_wakes_the_waiting_pages(eng: Engine) -> None:
    """One watcher per UI waits on the store (LISTEN/NOTIFY on PostgreSQL, polling on
    SQLite): an append after a page started listening moves the count it waits on."""
    from replay.ui.news import News

    rid = paused(eng)
    news = News(eng.store)
    heard = news.wait(-1, 0)  # the first listener starts the watcher
    assert news.wait(heard, 0.05) == heard  # nothing appended: no news
    eng.answer(rid, "no")
    assert news.wait(heard, 30) != heard


def test_the_pager_keeps_the_event_type_filter(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paging a filtered timeline stays filtered: the pager's links carry the types."""
    rid = paused(eng)
    monkeypatch.setattr(runpage, "PAGE", 1)
    c = client(eng)
    shown = ["tool_invoked", "tool_returned"]
    first = c.get(f"/runs/{rid}", params={"type": shown, "page": "1"})
    assert "page 1 of " in first.text
    link = unescape(first.text.split('<p class="pager">')[1].split('">next</a>')[0])
    query = link.split('href="')[-1]
    assert "type=tool_invoked" in query and "type=tool_returned" in query, query
    second = c.get(f"/runs/{rid}{query}")
    assert "page 2 of " in second.text
    assert {t for t in shown} >= set(re.findall(r'data-type="(\w+)"', second.text))
