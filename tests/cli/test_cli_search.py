"""``agentlog runs --key`` and ``runs --input-contains``, in process on a SQLite file and
on PostgreSQL: the quick path and the Typer app give the same output; --key lists each
claiming run with its claim's outcome and takes no other filter; --input-contains narrows
any listing (the index, or the view with its filters and pages)."""

from __future__ import annotations

import functools

import pytest
from test_cli_kit import Result

from engine import Engine
from engine.log.history import run_stream, started
from engine.store.codec import encode_event
from replay.cli import full, quick
from replay.cli.entry import hoist, run_cli
from replay.cli.exits import guarded
from tests.agents import ui_agents
from tests.conftest import backends, write_raw_row


def _cli(capsys: pytest.CaptureFixture[str], *argv: str, typer_app: bool = False) -> Result:
    """``argv`` by the quick path (which must take it), or by the Typer app."""
    if typer_app:
        code = guarded(functools.partial(full.invoke, hoist(list(argv)), ""), "")
    else:
        assert quick.plan(hoist(list(argv))) is not None, argv
        code = run_cli(list(argv))
    out = capsys.readouterr()
    return Result(code, out.out, out.err)


def _both(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    """The quick path's result, once the Typer app gave the same."""
    fast, slow = _cli(capsys, *argv), _cli(capsys, *argv, typer_app=True)
    assert (fast.code, fast.out, fast.err) == (slow.code, slow.out, slow.err)
    return fast


@pytest.fixture
def runs(eng: Engine) -> dict[str, str]:
    booking = ui_agents.booking  # its side effect claims hold:ORDER
    first = eng.run(booking, order="A-1").run_id
    eng.abandon(first)
    second = eng.run(booking, order="A-1").run_id
    third = eng.run(booking, order="Z-9").run_id
    return {"first": first, "second": second, "third": third}


@backends("sqlite", "postgres")
def test_runs_key_lists_each_claim_with_its_outcome(
    store_url: str, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _both(capsys, "runs", "--key", "hold:A-1", "--json", "--url", store_url).json()
    assert [(d["run_id"], d["status"], d["outcome"], d["call"]) for d in docs] == [
        (runs["first"], "abandoned", "compensated", 1),
        (runs["second"], "paused", "committed", 1),
    ]
    assert docs[1]["sent_key"] == "hold:A-1#v2" and docs[1]["agent"].endswith("booking")
    text = _both(capsys, "--url", store_url, "runs", "--key=hold:A-1").out
    assert runs["first"] in text and "compensated" in text and "committed" in text
    none = _both(capsys, "runs", "--key", "hold:nope", "--url", store_url)
    assert none.code == 0 and "no run claimed key 'hold:nope'" in none.out
    assert _both(capsys, "runs", "--key", "x", "--json", "--url", store_url).json() == []
    mixed = _both(capsys, "runs", "--key", "hold:A-1", "--status", "paused", "--url", store_url)
    assert mixed.code == 2 and mixed.out == "" and "--key takes no other filter" in mixed.err


@backends("sqlite", "postgres")
def test_runs_input_contains_narrows_the_index_and_the_view(
    store_url: str, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    def ids(*more: str) -> list[str]:
        r = _both(capsys, "runs", "--json", "--url", store_url, *more)
        assert r.code == 0, r.err
        return [doc["run_id"] for doc in r.json()]

    both = [runs["second"], runs["first"]]
    assert ids("--input-contains", "A-1") == both
    assert ids("--input-contains", "A-1", "--status", "paused") == [runs["second"]]
    assert ids("--input-contains", "A-1", "--limit", "1", "--offset", "1") == [runs["first"]]
    assert ids("--input-contains", '"order":"Z-9"', "--since", "1h") == [runs["third"]]
    assert ids("--input-contains", "nowhere") == []
    empty = _both(capsys, "runs", "--input-contains", "", "--url", store_url)
    assert empty.code == 2 and "needs some text" in empty.err


@backends("sqlite", "postgres")
def test_an_input_search_lists_the_readable_matches_and_names_a_damaged_run(
    store_url: str, eng: Engine, runs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose first event no longer decodes is no match; the others are listed and
    a note on stderr names it (exit 0)."""
    topic = encode_event(started(eng.store, runs["third"]))[0]
    write_raw_row(store_url, eng.store, "events", run_stream(runs["third"]), 1, topic, b"\xc1")
    r = _both(capsys, "runs", "--input-contains", "A-1", "--json", "--url", store_url)
    assert r.code == 0 and [d["run_id"] for d in r.json()] == [runs["second"], runs["first"]]
    assert r.err.startswith("note: 1 run could not be searched") and runs["third"] in r.err
