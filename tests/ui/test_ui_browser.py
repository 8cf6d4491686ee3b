"""The UI in a real browser: Debian's chromium, headless, driven by Playwright (never
``playwright install``); skipped only where /usr/bin/chromium is absent (CI installs it).
Open the board, filter it, click into a paused run, answer it and watch it move on and
complete without a reload; read the state at an event; see a tool's markup as text;
abandon (confirmed), fork a run and fork it as a dry run."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import Engine
from replay.ui import app
from tests.agents import ui_agents

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.processes,  # a browser process: scripts/test --quick leaves these out
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no /usr/bin/chromium here"),
]
WAIT_MS = 15_000


@pytest.fixture
def served(eng: Engine) -> Iterator[str]:
    """The UI over ``eng`` served by uvicorn on a free loopback port, in a thread."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(app(eng), log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page()
        tab.set_default_timeout(WAIT_MS)
        yield tab
        browser.close()


def test_answer_a_paused_run_and_watch_it_complete_live(eng: Engine, served: str, page) -> None:  # type: ignore[no-untyped-def]
    """Board -> the paused run -> answer: the page shows it running (its ship held on the
    gate), then completed once the gate opens, without a reload (a marker set on the
    page's window survives)."""
    from playwright.sync_api import expect

    rid = eng.run(ui_agents.asker, order="b1").run_id
    other = eng.run(ui_agents.stocker, order="b2").run_id
    page.goto(served + "/")
    expect(page.locator(f'tr[data-run="{other}"]')).to_be_visible()
    page.select_option('select[name="status"]', "paused")
    page.click('form.filters button[type="submit"]')
    expect(page.locator(f'tr[data-run="{other}"]')).to_have_count(0)
    page.click(f'tr[data-run="{rid}"] a.run-link')
    expect(page.locator("#status")).to_have_text("paused")
    page.evaluate("window.__same_page = true")
    ui_agents.GATE.clear()
    try:
        page.fill("#answer-value", "yes")
        page.click('#answer-form button[type="submit"]')
        expect(page.locator("#status")).to_have_text("running")  # live: the ship is held
    finally:
        ui_agents.GATE.set()
    expect(page.locator("#status")).to_have_text("completed")
    expect(page.locator("#output")).to_contain_text("shipped b1")
    assert page.evaluate("window.__same_page") is True  # updated in place, not reloaded


def test_markup_is_text_a_click_shows_the_state_and_abandon_asks_first(  # type: ignore[no-untyped-def]
    eng: Engine, served: str, page
) -> None:
    from playwright.sync_api import expect

    rid = eng.run(ui_agents.asker, order="c1").run_id
    ui_agents.REFUNDS.clear()
    replies = iter([False, True])  # the first confirmation dismissed, the second accepted
    asked: list[str] = []

    def reply(dialog) -> None:  # type: ignore[no-untyped-def]
        asked.append(dialog.type)
        assert "charge" in dialog.message  # what the abandon compensates, named first
        dialog.accept() if next(replies) else dialog.dismiss()

    page.on("dialog", reply)
    page.goto(f"{served}/runs/{rid}")
    expect(page.locator("#timeline")).to_contain_text("<script>alert('c1')</script>")
    assert page.locator("#timeline script").count() == 0  # text, not an element
    page.click('#timeline li[data-position="2"] a.at')
    expect(page.locator("#at")).to_have_text("2")
    expect(page.locator("#state")).to_contain_text('"position": 2')
    page.go_back()
    page.click('form[action$="/abandon"] button')
    assert asked == ["confirm"]
    expect(page.locator("#status")).to_have_text("paused")  # dismissed: nothing done
    page.click('form[action$="/abandon"] button')
    expect(page.locator("#status")).to_have_text("abandoned")
    assert asked == ["confirm", "confirm"] and ui_agents.REFUNDS == ["r-c1"]


def test_fork_from_a_checkpoint_and_diff_it(eng: Engine, served: str, page) -> None:  # type: ignore[no-untyped-def]
    from playwright.sync_api import expect

    rid = eng.run(ui_agents.asker, order="d1").run_id
    page.on("dialog", lambda d: d.accept())
    page.goto(f"{served}/runs/{rid}")
    page.fill('#rewind-form input[name="to"]', "charged")
    page.click('#rewind-form button[type="submit"]')
    expect(page.locator("h1 #run-id")).not_to_have_text(rid)
    fork = page.locator("#run-id").inner_text()
    assert eng.state(fork).parent_run_id == rid
    page.goto(f"{served}/diff?a={rid}@1&b={fork}")
    expect(page.locator("#diff")).to_be_visible()
    # a dry run of the parent answered "yes": it stops at the ship it would have sent
    page.goto(f"{served}/runs/{rid}")
    page.fill('#rewind-form input[name="to"]', "charged")
    page.fill("#fork-answer", "yes")
    page.check("#fork-dry")
    page.click('#rewind-form button[type="submit"]')
    expect(page.locator("#status")).to_have_text("dry_run")
    expect(page.locator("#would-send")).to_contain_text("ship")
    assert page.locator("#run-id").inner_text() not in (rid, fork)
