"""Typed values (engine.codec): tool results and decisions come back as the type their
function declares, live and on replay, equal and of the same type, for msgspec Structs,
dataclasses, attrs classes, pydantic v2 models, TypedDicts, Enums, datetime/date/time,
UUID, Decimal, bytes, sets and tuples, and for types registered with
``engine.codec.register``. An unsupported value fails naming its type, nothing recorded.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import uuid
from typing import Any, TypedDict

import attrs
import msgspec
import pydantic
import pytest
from conftest import all_backends
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine import Engine
from engine.errors import NonDeterminismError, UsageError


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Order:
    id: int
    placed: dt.datetime
    tags: tuple[str, ...]


@attrs.define
class Basket:
    items: set[int]
    pair: tuple[int, str]


class Price(pydantic.BaseModel):
    label: str
    amount: decimal.Decimal


class Blob(msgspec.Struct):
    ref: uuid.UUID
    data: bytes


class Slot(TypedDict):
    color: Color
    day: dt.date
    at: dt.time


class Money:
    """A type msgspec does not know: it needs engine.codec.register."""

    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and other.cents == self.cents

    def __hash__(self) -> int:
        return hash(self.cents)


engine.codec.register(Money, lambda m: {"cents": m.cents}, lambda d: Money(d["cents"]))

SAMPLES: dict[str, tuple[Any, Any]] = {
    "dataclass": (Order, Order(7, dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), ("a", "b"))),
    "attrs": (Basket, Basket({1, 2, 3}, (4, "x"))),
    "pydantic": (Price, Price(label="lamp", amount=decimal.Decimal("19.90"))),
    "struct": (Blob, Blob(uuid.UUID(int=42), b"\x00\xffdata")),
    "typeddict": (Slot, Slot(color=Color.BLUE, day=dt.date(2026, 5, 6), at=dt.time(7, 8, 9))),
    "enum": (Color, Color.RED),
    "decimal": (decimal.Decimal, decimal.Decimal("-0.000123")),
    "uuid": (uuid.UUID, uuid.UUID(int=7)),
    "bytes": (bytes, b"\x01\x02"),
    "set": (set[str], {"x", "y"}),
    "frozenset": (frozenset[int], frozenset({1, 2})),
    "tuple": (tuple[int, str, float], (1, "two", 3.5)),
    "nested": (list[Price], [Price(label="a", amount=decimal.Decimal(1))]),
    "registered": (Money, Money(1250)),
    "date": (dt.date, dt.date(2026, 12, 1)),
    "time": (dt.time, dt.time(23, 59, 58)),
}


def _live_and_replayed(eng: Engine, tp: Any, value: Any) -> tuple[list[Any], list[Any]]:
    """Run an agent that gets ``value`` from a tool and from a decision (both declaring
    ``tp``), pausing after; answer it so it replays both: what each execution saw."""
    seen: list[list[Any]] = []

    def make() -> Any:
        return value

    make.__annotations__["return"] = tp
    tool = eng.tool(make, name=f"make_{uuid.uuid4().hex[:6]}")

    @eng.agent
    def typed_agent(run: Any) -> None:
        seen.append([tool(), run.decide("decide", make)])
        run.ask("continue?")

    r = eng.run(typed_agent)
    assert r.status == "paused", r.error
    assert eng.answer(r.run_id, "yes").status == "completed"
    return seen[0], seen[-1]


@all_backends
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_values_keep_their_declared_type_live_and_on_replay(eng: Engine, name: str) -> None:
    tp, value = SAMPLES[name]
    live, replayed = _live_and_replayed(eng, tp, value)
    for got in (*live, *replayed):
        assert got == value
        assert type(got) is type(value)


def test_without_a_declared_type_the_plain_value_comes_back() -> None:
    """No annotation: the value as the log holds it (a dataclass as a dict), as before."""
    eng = Engine("memory://")

    @eng.tool
    def untyped():  # type: ignore[no-untyped-def]
        return Order(1, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), ("t",))

    @eng.agent
    def plain(run: Any) -> Any:
        return untyped()

    out = eng.run(plain).output
    assert out == {"id": 1, "placed": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "tags": ["t"]}


class Opaque:
    pass


@all_backends
def test_an_unsupported_value_fails_naming_its_type_and_records_no_decision(eng: Engine) -> None:
    @eng.agent
    def opaque(run: Any) -> None:
        run.decide("x", Opaque)

    r = eng.run(opaque)
    assert r.status == "failed"
    assert r.error is not None and "Opaque" in r.error and "engine.codec.register" in r.error
    assert "llm_decided" not in [e.type for e in eng.events(r.run_id)]


def test_a_recorded_value_that_no_longer_fits_the_declared_type_is_a_divergence() -> None:
    """Replayed under code that now declares another type, the recorded value does not
    fit: NonDeterminismError, nothing recorded (the answer is refused too)."""
    eng = Engine("memory://")
    declared: dict[str, Any] = {"tp": Color}

    def make() -> Any:
        return Color.RED

    @eng.agent
    def drifting(run: Any) -> None:
        make.__annotations__["return"] = declared["tp"]
        engine.codec.returns.cache_clear()
        run.decide("n", make)
        run.ask("go?")

    r = eng.run(drifting)
    assert r.status == "paused", r.error
    declared["tp"] = Basket
    with pytest.raises(NonDeterminismError, match="declared type Basket"):
        eng.answer(r.run_id, "yes")
    assert eng.state(r.run_id).status == "paused"


def test_a_live_value_that_does_not_fit_its_declared_type_is_not_recorded() -> None:
    eng = Engine("memory://")

    def wrong() -> int:
        return "seven"  # type: ignore[return-value]

    @eng.agent
    def careless(run: Any) -> None:
        run.decide("n", wrong)

    r = eng.run(careless)
    assert r.status == "failed" and r.error is not None and "declared type int" in r.error
    assert "llm_decided" not in [e.type for e in eng.events(r.run_id)]


def test_register_refuses_what_is_not_a_type_or_not_callable() -> None:
    with pytest.raises(UsageError, match="takes a type"):
        engine.codec.register("Money", str, str)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="callables"):
        engine.codec.register(Money, "encode", str)  # type: ignore[arg-type]


ints = st.integers(-(2**63), 2**63 - 1)  # what msgpack holds
values = st.one_of(
    st.builds(Order, ints, st.datetimes(timezones=st.just(dt.UTC)), st.tuples(st.text())),
    st.builds(Basket, st.sets(ints), st.tuples(ints, st.text())),
    st.builds(
        Price,
        label=st.text(),
        amount=st.decimals(allow_nan=False, allow_infinity=False),
    ),
    st.builds(Blob, st.uuids(), st.binary()),
    st.builds(Money, ints),
    st.sampled_from(list(Color)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values)
def test_property_live_and_replayed_values_are_equal_and_of_one_type(value: Any) -> None:
    eng = Engine("memory://")
    live, replayed = _live_and_replayed(eng, type(value), value)
    for got in (*live, *replayed):
        assert got == value and type(got) is type(value)


class Aliased(pydantic.BaseModel):
    """Field aliases (a camelCase API), extra fields forbidden, a computed field."""

    model_config = pydantic.ConfigDict(extra="forbid")
    event_id: str = pydantic.Field(alias="eventId")
    count: int

    @pydantic.computed_field  # type: ignore[prop-decorator]
    @property
    def double(self) -> int:
        return self.count * 2


def test_pydantic_aliases_and_computed_fields_round_trip() -> None:
    eng = Engine("memory://")
    made = Aliased(eventId="e1", count=2)

    @eng.tool
    def fetch() -> Aliased:
        return made

    def model() -> Aliased:
        return made

    crash = {"once": True}

    @eng.agent
    def agent(run: Any) -> int:
        a, b = fetch(), run.decide("m", model)
        assert isinstance(a, Aliased) and isinstance(b, Aliased) and a == b == made
        if crash.pop("once", False):
            raise RuntimeError("dies")
        return a.double + b.double

    assert eng.run(agent).status == "failed"
    r = eng.resume(eng.runs()[0].run_id)
    assert (r.status, r.output) == ("completed", 8), r.error


def test_codec_register_is_reachable_from_an_engine() -> None:
    """CONTRACT names it ``engine.codec.register`` where ``engine`` is an Engine."""
    eng = Engine("memory://")
    assert eng.codec.register is engine.codec.register
