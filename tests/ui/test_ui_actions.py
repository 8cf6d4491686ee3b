"""The UI's actions in-process: each a POST that needs the CSRF value (none, or a wrong
one: 403, nothing done); answer (text or JSON), abandon (compensating), rewind to a fork,
resume; the engine's refusals a 400 with its one line; the access token's gate."""

from __future__ import annotations

import json

import pytest
from conftest import backends
from ui_kit import client, csrf, main_text

from engine import Engine
from engine.kinds import RunStatus
from tests.agents import ui_agents


def paused(eng: Engine, order: str = "a1") -> str:
    return eng.run(ui_agents.asker, order=order).run_id


def test_a_post_without_the_csrf_value_is_refused_and_changes_nothing(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    csrf(c)
    for form in [{"value": "yes"}, {"value": "yes", "csrf": "forged" * 8}]:
        r = c.post(f"/runs/{rid}/answer", data=form, follow_redirects=False)
        assert r.status_code == 403
        assert "CSRF" in main_text(r.text)
    fetched = c.post(f"/runs/{rid}/abandon", data={}, headers={"X-Agentlog-Fetch": "1"})
    assert fetched.status_code == 403 and "CSRF" in fetched.json()["error"]
    assert eng.state(rid).status == RunStatus.PAUSED


def test_a_post_from_a_page_of_another_origin_is_refused(eng: Engine) -> None:
    """A browser names the page's origin with every POST: another site's is refused even
    with a CSRF value (one read by a page that rebound its name to this address)."""
    rid = paused(eng)
    c = client(eng)
    form = {"value": "yes", "csrf": csrf(c)}
    r = c.post(f"/runs/{rid}/answer", data=form, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    assert eng.state(rid).status == RunStatus.PAUSED
    ok = c.post(f"/runs/{rid}/answer", data=form, headers={"Origin": "http://testserver"})
    assert ok.status_code == 200 and eng.state(rid).status == RunStatus.COMPLETED


def test_with_hosts_a_request_naming_another_host_is_refused(eng: Engine) -> None:
    """``agentlog ui`` on loopback without a token names its hosts: a rebound name
    (DNS rebinding) gets no page."""
    from replay.cli.web import LOOPBACK_HOSTS

    rid = paused(eng)
    from starlette.testclient import TestClient

    from replay.ui import app

    web = app(eng, hosts=LOOPBACK_HOSTS)
    assert TestClient(web, base_url="http://evil.example:8765").get("/").status_code == 400
    for base in ["http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"]:
        page = TestClient(web, base_url=base).get(f"/runs/{rid}")
        assert page.status_code == 200, base


def test_a_ui_on_another_loopback_address_serves_its_own_host(eng: Engine) -> None:
    """``agentlog ui --addr 127.0.0.2`` (loopback: no token needed) answers a request
    naming that address; another name still gets no page."""
    from starlette.testclient import TestClient

    from replay.cli.web import allowed_hosts
    from replay.ui import app

    assert allowed_hosts("0.0.0.0", "t" * 16) is None  # behind a token: any name
    web = app(eng, hosts=allowed_hosts("127.0.0.2", None))
    assert TestClient(web, base_url="http://127.0.0.2:8765").get("/").status_code == 200
    assert TestClient(web, base_url="http://evil.example:8765").get("/").status_code == 400
    six = app(eng, hosts=allowed_hosts("0:0:0:0:0:0:0:1", None))
    assert TestClient(six, base_url="http://[0:0:0:0:0:0:0:1]:8765").get("/").status_code == 200


def test_a_csrf_value_from_another_browser_is_refused(eng: Engine) -> None:
    """The value must be this browser's cookie, not any value the UI ever issued."""
    rid = paused(eng)
    theirs = csrf(client(eng))
    mine = client(eng)
    csrf(mine)
    r = mine.post(f"/runs/{rid}/answer", data={"value": "yes", "csrf": theirs})
    assert r.status_code == 403
    assert eng.state(rid).status == RunStatus.PAUSED


@backends("sqlite", "postgres")
def test_answering_a_paused_run_continues_it_to_completion(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    r = c.post(
        f"/runs/{rid}/answer", data={"value": "yes", "csrf": csrf(c)}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == f"/runs/{rid}"
    state = eng.state(rid)
    assert state.status == RunStatus.COMPLETED
    assert state.output["shipped"] == "shipped a1"
    assert "completed" in c.get(r.headers["location"]).text


def test_a_json_answer_and_the_scripts_json_reply(eng: Engine) -> None:
    """``as_json=1`` parses the value as JSON; the page's script gets JSON back."""
    rid = paused(eng)
    c = client(eng)
    form = {"value": json.dumps("no"), "as_json": "1", "csrf": csrf(c)}
    r = c.post(f"/runs/{rid}/answer", data=form, headers={"X-Agentlog-Fetch": "1"})
    assert r.status_code == 200
    assert r.json()["status"] == "completed" and r.json()["output"]["answer"] == "no"
    again = c.post(f"/runs/{rid}/answer", data=form, headers={"X-Agentlog-Fetch": "1"})
    assert again.status_code == 400 and "not waiting for an answer" in again.json()["error"]
    refused = paused(eng, "b")
    for value, says in [
        ("{", "not valid JSON"),
        (str(10**30), "beyond 64 bits"),
        ("1e400", "not a finite number"),
        ("NaN", "not a finite number"),
        ('"\\ud800"', "lone surrogate"),
        ("[" * 3000 + "]" * 3000, "nests deeper"),
    ]:  # read as `agentlog answer --json-value` reads it: 400, one line, nothing recorded
        bad = c.post(f"/runs/{refused}/answer", data={**form, "value": value})
        assert bad.status_code == 400 and says in main_text(bad.text), value
    assert eng.state(refused).status == RunStatus.PAUSED


@backends("sqlite", "postgres")
def test_abandon_compensates_the_charge(eng: Engine) -> None:
    """The page names the standing charge before; the abandon compensates it."""
    rid = paused(eng, "ab")
    ui_agents.REFUNDS.clear()
    c = client(eng)
    before = c.get(f"/runs/{rid}").text
    assert 'id="undoable"' in before and "charge (call 2)" in before
    r = c.post(f"/runs/{rid}/abandon", data={"csrf": csrf(c)}, follow_redirects=False)
    assert r.status_code == 303
    assert eng.state(rid).status == RunStatus.ABANDONED
    assert ui_agents.REFUNDS == ["r-ab"]
    page = c.get(f"/runs/{rid}").text
    assert 'action="/runs/' + rid + '/abandon"' not in page  # an ended run offers no abandon


def test_rewind_forks_from_a_checkpoint_and_goes_to_the_fork(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng)
    form = {"to": "charged", "effects": "reuse", "csrf": csrf(c)}
    r = c.post(f"/runs/{rid}/rewind", data=form, follow_redirects=False)
    assert r.status_code == 303
    fork = r.headers["location"].rsplit("/", 1)[1]
    assert fork != rid and eng.state(fork).parent_run_id == rid
    for bad in [{"to": ""}, {"to": "charged", "effects": "twice"}, {"to": str(10**30)}]:
        refused = c.post(f"/runs/{rid}/rewind", data={**form, **bad})
        assert refused.status_code == 400, bad


def test_resume_of_a_completed_run_returns_its_result(eng: Engine) -> None:
    done = eng.run(ui_agents.stocker, order="r1").run_id
    c = client(eng)
    r = c.post(f"/runs/{done}/resume", data={"csrf": csrf(c)}, headers={"X-Agentlog-Fetch": "1"})
    assert r.status_code == 200 and r.json()["output"] == "in stock"


def test_an_action_on_an_unknown_run_or_an_unknown_action(eng: Engine) -> None:
    c = client(eng)
    token = csrf(c)
    assert c.post("/runs/nope/resume", data={"csrf": token}).status_code == 404
    rid = paused(eng)
    assert c.post(f"/runs/{rid}/explode", data={"csrf": token}).status_code == 404
    assert c.get(f"/runs/{rid}/abandon").status_code == 405  # actions are POSTs only
    assert eng.state(rid).status == RunStatus.PAUSED


TOKEN = "s3cret-token-of-the-ui-0123456789"


def test_with_a_token_every_request_must_present_it(eng: Engine) -> None:
    rid = paused(eng)
    c = client(eng, token=TOKEN)
    for path in ["/", f"/runs/{rid}", "/stats", "/static/ui.js", f"/live?run={rid}&once=1"]:
        assert c.get(path).status_code == 401, path
    assert c.get("/", params={"token": "wrong"}).status_code == 401
    assert c.get("/", headers={"X-Agentlog-Token": TOKEN}).status_code == 200
    assert c.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert c.post(f"/runs/{rid}/abandon", data={}).status_code == 401
    assert eng.state(rid).status == RunStatus.PAUSED


def test_a_first_visit_with_the_token_sets_a_cookie_and_drops_it_from_the_url(
    eng: Engine,
) -> None:
    c = client(eng, token=TOKEN)
    first = c.get("/", params={"token": TOKEN, "status": "paused"}, follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/?status=paused"  # the token left the URL
    assert "httponly" in first.headers["set-cookie"].lower()
    assert c.get("/?status=paused").status_code == 200  # the cookie lets it in now
    assert TOKEN not in c.get("/").text


def test_the_app_mounts_under_a_path_of_a_users_server(eng: Engine) -> None:
    """Links and forms follow the mount point."""
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from replay.ui import app

    mounted = "/ops"
    rid = paused(eng)
    c = TestClient(Starlette(routes=[Mount(mounted, app(eng))]))
    board = c.get(f"{mounted}/")
    assert board.status_code == 200 and f'href="{mounted}/runs/{rid}"' in board.text
    page = c.get(f"{mounted}/runs/{rid}").text
    assert f'action="{mounted}/runs/{rid}/answer"' in page
    assert c.get(f"{mounted}/static/ui.js").status_code == 200
    r = c.post(f"{mounted}/runs/{rid}/answer", data={"value": "no", "csrf": csrf(c, mounted)})
    assert r.status_code == 200 and eng.state(rid).status == RunStatus.COMPLETED


def test_the_actions_offered_follow_the_status() -> None:
    from replay.ui.runpage import offered

    assert offered(RunStatus.PAUSED) == {"answer", "abandon", "rewind", "send"}
    assert offered(RunStatus.HELD) == {"approve", "abandon", "rewind", "send"}
    assert offered(RunStatus.FAILED) == {"resume", "abandon", "rewind", "send"}
    assert offered(RunStatus.RUNNING) == {"resume", "abandon", "rewind", "send"}
    assert offered(RunStatus.WAITING) == {"resume", "abandon", "rewind", "send"}
    assert offered(RunStatus.COMPLETED) == offered(RunStatus.ABANDONED) == {"rewind"}
    assert offered(RunStatus.DRY_RUN) == {"rewind"}


def test_every_response_forbids_frames_and_foreign_scripts(eng: Engine) -> None:
    """No page can be framed (its buttons under another site's clicks), run a script but
    the UI's own, or send its address (a first visit's token) to another site."""
    c = client(eng, token=TOKEN)
    for r in [c.get("/"), c.get("/", headers={"X-Agentlog-Token": TOKEN}), c.get("/nope")]:
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert "default-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"


def test_an_unexpected_error_is_a_500_page_not_a_traceback(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from starlette.testclient import TestClient

    from replay.ui import app, runpage

    def broken(*args: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(runpage, "read", broken)
    rid = paused(eng)
    r = TestClient(app(eng), raise_server_exceptions=False).get(f"/runs/{rid}")
    assert r.status_code == 500
    assert "unexpected ZeroDivisionError" in main_text(r.text) and "Traceback" not in r.text


def test_a_langgraph_thread_offers_no_action_the_engine_would_refuse(eng: Engine) -> None:
    """A LangGraph thread (like an imported run) is history no engine here executes:
    its page offers no resume, abandon or fork, each of which would only be refused."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from engine.integrations.langgraph import AgentlogSaver

    saver = AgentlogSaver(eng)
    saver.put({"configurable": {"thread_id": "t1"}}, empty_checkpoint(), {}, {})
    text = client(eng).get("/runs/lg:t1").text
    assert 'id="no-actions"' in text
    for form in ("resume", "abandon", "rewind"):
        assert f'/runs/lg%3At1/{form}"' not in text, form
    from replay.ui.runpage import offered

    assert offered(RunStatus.RUNNING, imported=True) == frozenset()
