"""Typed child outputs and answers (engine.codec), on memory, SQLite and PostgreSQL: a
child's output comes back to its parent as the type the child's agent declares, through
``child.result()``, ``run.call``, ``run.gather`` and ``await child``, live and on replay
equal and of the same type; ``engine.answer`` takes typed values and
``run.ask(question, returns=T)`` gives the answer back as ``T``, live and on replay; an
answer that does not fit ``T`` is refused with nothing recorded."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import uuid
from typing import Any

import msgspec
import pydantic
import pytest
from conftest import all_backends
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine
from engine.errors import UsageError


class Mood(enum.Enum):
    CALM = "calm"
    BUSY = "busy"


@dataclasses.dataclass
class Finding:
    topic: str
    score: decimal.Decimal
    seen: dt.datetime
    tags: tuple[str, ...]


class Report(pydantic.BaseModel):
    title: str
    when: dt.date
    mood: Mood


class Ref(msgspec.Struct):
    id: uuid.UUID
    raw: bytes


SAMPLES: dict[str, tuple[Any, Any]] = {
    "dataclass": (
        Finding,
        Finding("x", decimal.Decimal("1.50"), dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC), ("a",)),
    ),
    "pydantic": (Report, Report(title="t", when=dt.date(2026, 3, 4), mood=Mood.BUSY)),
    "struct": (Ref, Ref(uuid.UUID(int=9), b"\x00\x01")),
    "enum": (Mood, Mood.CALM),
    "datetime": (dt.datetime, dt.datetime(2026, 12, 1, 21, 0, tzinfo=dt.UTC)),
    "set": (set[int], {3, 1, 2}),
    "tuple": (tuple[str, int], ("a", 1)),
    "nested": (list[Report], [Report(title="n", when=dt.date(2026, 1, 1), mood=Mood.CALM)]),
}


def _returning(eng: Engine, tp: Any, value: Any) -> Any:
    """A child agent declaring ``tp`` as its result, returning ``value``."""

    def child(run: Any) -> Any:
        return value

    child.__annotations__["return"] = tp
    child.__qualname__ = child.__name__ = f"child_{uuid.uuid4().hex[:6]}"
    return eng.agent(child)


def _live_and_replayed(eng: Engine, tp: Any, value: Any) -> tuple[list[Any], list[Any]]:
    """A parent that gets the child's output four ways (result, call, gather of two),
    then asks a person (so the answer replays it all): what each execution saw."""
    child = _returning(eng, tp, value)
    seen: list[list[Any]] = []

    @eng.agent
    def parent(run: Any) -> None:
        first = run.spawn(child).result()
        second = run.call(child)
        third, fourth = run.gather(run.spawn(child), run.spawn(child))
        seen.append([first, second, third, fourth])
        run.ask("continue?")

    r = eng.run(parent)
    assert r.status == "paused", r.error
    assert eng.answer(r.run_id, "yes").status == "completed"
    return seen[0], seen[-1]


@all_backends
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_child_outputs_keep_the_child_agents_declared_type_live_and_on_replay(
    eng: Engine, name: str
) -> None:
    tp, value = SAMPLES[name]
    live, replayed = _live_and_replayed(eng, tp, value)
    assert len(live) == len(replayed) == 4
    for got in (*live, *replayed):
        assert got == value
        assert type(got) is type(value)


@all_backends
def test_an_async_parent_awaiting_its_children_gets_typed_outputs(eng: Engine) -> None:
    """``await child`` and ``await run.gather(...)`` in an async agent: the declared type,
    live and on replay."""
    tp, value = SAMPLES["pydantic"]
    child = _returning(eng, tp, value)
    seen: list[list[Any]] = []

    @eng.agent
    async def parent(run: Any) -> None:
        one = await run.spawn(child)
        two, three = await run.gather(run.spawn(child), run.spawn(child))
        seen.append([one, two, three])
        run.ask("continue?")

    r = eng.run(parent)
    assert r.status == "paused", r.error
    assert eng.answer(r.run_id, "yes").status == "completed"
    assert len(seen) >= 2  # live, then replayed (by the answer's check and its resume)
    for got in (*seen[0], *seen[-1]):
        assert got == value and type(got) is Report


@all_backends
def test_a_child_without_a_declared_type_gives_the_plain_output(eng: Engine) -> None:
    """No annotation (or ``Any``): the output as the log holds it, as before."""

    @eng.agent
    def untyped(run):  # type: ignore[no-untyped-def]
        return SAMPLES["dataclass"][1]

    @eng.agent
    def parent(run: Any) -> Any:
        return run.call(untyped)

    out = eng.run(parent).output
    assert out == {
        "topic": "x",
        "score": "1.50",
        "seen": dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC),
        "tags": ["a"],
    }


@all_backends
def test_a_child_output_that_does_not_fit_its_declared_type_comes_back_as_recorded(
    eng: Engine,
) -> None:
    """A child whose output does not fit its own annotation: the parent gets the output
    as recorded (the same live and on replay), not a failure of the parent."""
    child = _returning(eng, Report, {"title": "only a title"})
    seen: list[Any] = []

    @eng.agent
    def parent(run: Any) -> None:
        seen.append(run.call(child))
        run.ask("continue?")

    r = eng.run(parent)
    assert r.status == "paused", r.error
    assert eng.answer(r.run_id, "yes").status == "completed"
    assert len(seen) >= 2 and all(s == {"title": "only a title"} for s in seen)


ANSWERS: dict[str, tuple[Any, Any]] = {
    "dataclass": SAMPLES["dataclass"],
    "pydantic": SAMPLES["pydantic"],
    "datetime": SAMPLES["datetime"],
    "date": (dt.date, dt.date(2026, 12, 24)),
    "decimal": (decimal.Decimal, decimal.Decimal("12.34")),
    "enum": (Mood, Mood.BUSY),
}


def _asking(eng: Engine, tp: Any) -> tuple[Any, list[Any]]:
    """An agent that asks for a ``tp``, then for an "ok" (to replay the first answer)."""
    seen: list[Any] = []

    @eng.agent
    def asks(run: Any) -> None:
        seen.append(run.ask("which?", returns=tp))
        run.ask("ok?")

    return asks, seen


@all_backends
@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_typed_answer_comes_back_as_the_declared_type_live_and_on_replay(
    eng: Engine, name: str
) -> None:
    tp, value = ANSWERS[name]
    asks, seen = _asking(eng, tp)
    r = eng.run(asks)
    assert r.status == "paused" and r.waiting == "which?"
    assert eng.answer(r.run_id, value).status == "paused"
    assert eng.answer(r.run_id, "ok").status == "completed"
    assert len(seen) >= 2  # answered live, then replayed by the second answer
    for got in seen:
        assert got == value and type(got) is type(value)


@all_backends
def test_an_answer_given_as_plain_data_is_converted_to_the_declared_type(eng: Engine) -> None:
    """What the CLI gives (text, or JSON with ``--json-value``) becomes the declared type."""
    asks, seen = _asking(eng, Report)
    r = eng.run(asks)
    eng.answer(r.run_id, {"title": "t", "when": "2026-03-04", "mood": "busy"})
    assert seen == [SAMPLES["pydantic"][1]] and type(seen[0]) is Report
    when, days = _asking(eng, dt.date)
    eng.answer(eng.run(when).run_id, "2026-12-24")
    assert days == [dt.date(2026, 12, 24)] and type(days[0]) is dt.date


@all_backends
def test_an_answer_that_does_not_fit_the_declared_type_is_refused_with_nothing_recorded(
    eng: Engine,
) -> None:
    asks, seen = _asking(eng, dt.date)
    r = eng.run(asks)
    before = len(eng.events(r.run_id))
    with pytest.raises(UsageError, match=r"the answer to 'which\?' does not fit .*date"):
        eng.answer(r.run_id, "not a date")
    assert len(eng.events(r.run_id)) == before
    assert eng.state(r.run_id).status == "paused" and seen == []
    assert eng.answer(r.run_id, dt.date(2026, 1, 1)).status == "paused"
    assert seen == [dt.date(2026, 1, 1)]


@all_backends
def test_without_returns_a_typed_answer_comes_back_as_plain_data(eng: Engine) -> None:
    """``run.ask(question)`` as before: a dataclass answer is recorded (as its fields)
    and given back as the plain data the log holds; an unsupported value is refused."""
    seen: list[Any] = []

    @eng.agent
    def asks(run: Any) -> None:
        seen.append(run.ask("which?"))

    r = eng.run(asks)
    with pytest.raises(UsageError, match="not supported"):
        eng.answer(r.run_id, object())
    assert eng.answer(r.run_id, SAMPLES["dataclass"][1]).status == "completed"
    assert seen == [
        {
            "topic": "x",
            "score": "1.50",
            "seen": dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC),
            "tags": ["a"],
        }
    ]


outputs = st.one_of(
    st.builds(
        Finding,
        st.text(),
        st.decimals(allow_nan=False, allow_infinity=False),
        st.datetimes(timezones=st.just(dt.UTC)),
        st.tuples(st.text()),
    ),
    st.builds(Report, title=st.text(), when=st.dates(), mood=st.sampled_from(list(Mood))),
    st.builds(Ref, st.uuids(), st.binary()),
    st.sampled_from(list(Mood)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=outputs)
def test_property_live_and_replayed_child_outputs_are_equal_and_of_one_type(value: Any) -> None:
    eng = Engine("memory://")
    live, replayed = _live_and_replayed(eng, type(value), value)
    eng.close()
    for got in (*live, *replayed):
        assert got == value and type(got) is type(value)


@all_backends
def test_a_childs_typed_question_answered_through_its_parent(eng: Engine) -> None:
    """``answer PARENT`` reaches the child that asks for a date: an answer that is not
    one is refused (nothing recorded, both still paused); a date continues the tree."""

    @eng.agent
    def asker(run: Any) -> dt.date:
        day: dt.date = run.ask("when?", returns=dt.date)
        return day + dt.timedelta(days=1)

    @eng.agent
    def boss(run: Any) -> str:
        day = run.call(asker)
        assert type(day) is dt.date  # the child's declared output type
        return day.isoformat()

    r = eng.run(boss)
    assert r.status == "paused"
    with pytest.raises(UsageError, match="does not fit"):
        eng.answer(r.run_id, "soon")
    assert eng.state(r.run_id).status == "paused"
    done = eng.answer(r.run_id, "2026-02-28")
    assert (done.status, done.output) == ("completed", "2026-03-01")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=outputs)
def test_property_live_and_replayed_answers_are_equal_and_of_one_type(value: Any) -> None:
    eng = Engine("memory://")
    asks, seen = _asking(eng, type(value))
    r = eng.run(asks)
    assert eng.answer(r.run_id, value).status == "paused"
    assert eng.answer(r.run_id, "ok").status == "completed"
    eng.close()
    assert len(seen) >= 2
    for got in seen:
        assert got == value and type(got) is type(value)
