"""A run's page tells only the lines of the events it shows (``runpage.page_of``): each
page's lines and the summary are those the whole story tells at the same positions
(nested steps, open calls at a crash, a plan's progress included)."""

from __future__ import annotations

from typing import Any

import pytest

from engine import Engine
from replay import timeline
from replay.ui import runpage
from replay.ui.render import line


def nested(eng: Engine) -> str:
    @eng.tool
    def look(what: str) -> str:
        return f"saw {what}"

    @eng.agent
    def walker(run: Any) -> list[str]:
        run.plan(["outer", "last"])
        seen = [look("a")]
        with run.step("outer"):
            seen.append(look("b"))
            with run.step("inner"):
                seen += [look("c"), look("d")]
            seen.append(look("e"))
        with run.step("last"):
            seen.append(look("f"))
        return seen

    return eng.run(walker).run_id


class Crash(BaseException):
    """The process stops in the middle of a call (no outcome recorded)."""


def crashed(eng: Engine) -> str:
    """A run that stopped with its charge in flight, then resumed: the resume's line
    names the open call, told from events on an earlier page."""
    tries: list[int] = []

    @eng.tool(side_effect=True)
    def charge(order: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise Crash
        return "charged"

    @eng.tool
    def price(order: str) -> int:
        return 7

    @eng.agent
    def crasher(run: Any) -> str:
        price("o")  # settled before the crash: not in flight
        return charge("o")

    with pytest.raises(Crash):
        eng.run(crasher)
    rid = eng.runs()[0].run_id
    eng.resume(rid)
    told = [str(line(p)) for p in timeline.story(list(timeline.events(eng, rid)))]
    assert any(
        "in flight when it stopped: call 2 crashed.&lt;locals&gt;.charge;" in t for t in told
    )
    return rid


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_each_page_tells_the_lines_the_whole_story_tells(
    eng: Engine, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    rid = nested(eng)
    check_pages(eng, rid, monkeypatch, size)
    crash = crashed(eng)
    check_pages(eng, crash, monkeypatch, size)


def check_pages(eng: Engine, rid: str, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    found = list(timeline.events(eng, rid))
    whole = [line(pieces) for pieces in timeline.story(found)]
    monkeypatch.setattr(runpage, "PAGE", size)
    stories = runpage.Stories()
    pages = runpage.read(eng, stories, rid, frozenset(), 1).pages
    told = []
    for number in range(1, pages + 1):
        page = runpage.read(eng, stories, rid, frozenset(), number)
        assert page.summary == whole[-1]
        told += [(e.position, e.html) for e in page.events]
    assert told == [(r.position, text) for r, text in zip(found, whole, strict=False)]
    again = runpage.read(eng, stories, rid, frozenset(), 1)  # a page told is kept
    assert again.events is runpage.read(eng, stories, rid, frozenset(), 1).events


def test_a_filtered_page_tells_its_events_as_the_whole_story_does(eng: Engine) -> None:
    rid = nested(eng)
    found = list(timeline.events(eng, rid))
    whole = dict(
        zip([r.position for r in found], [line(p) for p in timeline.story(found)], strict=False)
    )
    page = runpage.read(eng, runpage.Stories(), rid, frozenset({"step_completed"}), None)
    assert [e.type for e in page.events] == ["step_completed"] * 3
    assert [e.html for e in page.events] == [whole[e.position] for e in page.events]
