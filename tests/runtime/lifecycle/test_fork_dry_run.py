"""Dry-run forks (``engine.rewind(..., dry_run=True)``): the fork runs, but no side-effecting
tool is called; each records ``would_send`` (tool, arguments as stored, key), a call whose
tool declares it may return None returns None and the fork goes on, any other stops the
fork there, and the fork ends ``dry_run``. Children of a dry run are dry runs. Proved with
real services that count what reaches them: the demo's payment file and a loopback HTTP
server."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.loopback import Loopback, loopback
from conftest import backends

from engine import Engine
from engine.errors import UsageError
from engine.kinds import FINAL, RunStatus
from engine.runtime.waits.mailbox import posted
from replay import demo

both = backends("sqlite", "postgres")


def _post(svc: Loopback, order: str, key: str) -> dict[str, Any]:
    body = json.dumps({"order": order}).encode()
    req = urllib.request.Request(
        f"{svc.url}/charge", body, {"Idempotency-Key": key, "Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def _types(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


@pytest.fixture
def svc() -> Iterator[Loopback]:
    with loopback() as s:
        yield s


class Tree:
    """A parent that calls a child (which notifies), notifies itself, then calls a child
    that charges: every effect a POST to the counting service."""

    def __init__(self, eng: Engine, svc: Loopback) -> None:
        @eng.tool(side_effect=True, name="tree_notify")
        def notify(order: str, *, idempotency_key: str) -> dict[str, Any] | None:
            return _post(svc, f"notify-{order}", idempotency_key)

        @eng.tool(side_effect=True, name="tree_charge")
        def charge(order: str, *, idempotency_key: str) -> dict[str, Any]:
            return _post(svc, order, idempotency_key)

        @eng.tool(name="tree_lookup")
        def lookup(order: str) -> dict[str, Any]:
            return {"order": order, "cents": 100}

        @eng.agent(name="tests:dry_notifier")
        def notifier(run: Any, order: str) -> str:
            sent = notify(order)
            return "notified" if sent is not None else "would notify"

        @eng.agent(name="tests:dry_charger")
        def charger(run: Any, order: str) -> str:
            found = lookup(order)
            receipt = charge(found["order"])
            return str(receipt["receipt"])

        @eng.agent(name="tests:dry_tree")
        def parent(run: Any, order: str) -> dict[str, Any]:
            run.checkpoint("start")
            first = run.call(notifier, order=order)
            mine = notify(f"{order}-parent")
            receipt = run.call(charger, order=order)
            return {"first": first, "mine": mine is not None, "receipt": receipt}

        self.parent = parent


@both
def test_a_dry_run_fork_of_a_tree_sends_nothing_and_records_each_would_be_effect(
    eng: Engine, svc: Loopback
) -> None:
    """The first child goes on past a would-be notify (declared ``| None``: None), the
    parent past its own (the parent run's recorded receipt of it); the second child stops
    at its charge (a receipt cannot be made up) and so does the parent at that child: 0
    requests reach the service, every run of the fork's tree is a dry run, ends
    ``dry_run`` and says where it stopped."""
    tree = Tree(eng, svc)
    live = eng.run(tree.parent, order="o1")
    assert live.status == "completed" and len(svc.requests) == 3
    before = list(svc.requests)

    fork = eng.rewind(live.run_id, to="start", dry_run=True)
    assert svc.requests == before  # nothing reached the service
    assert fork.status == RunStatus.DRY_RUN and fork.output is None
    assert fork.error is not None and "child run" in fork.error
    [mine] = _types(eng, fork.run_id, "would_send")
    assert (mine["tool"], mine["args"], mine["stopped"]) == (
        "tree_notify",
        {"order": "o1-parent"},
        False,
    )
    assert mine["parent_call"] == 3 and mine["result"] is not None
    assert mine["key"] == f"{fork.run_id}:3"
    kids = [r for r in eng.runs() if r.parent_run_id == fork.run_id]
    assert len(kids) == 2 and all(k.status == RunStatus.DRY_RUN for k in kids)
    by_agent = {k.agent: k.run_id for k in kids}
    [note] = _types(eng, by_agent["tests:dry_notifier"], "would_send")
    assert note["tool"] == "tree_notify" and not note["stopped"]
    assert [e.type for e in eng.events(by_agent["tests:dry_notifier"])][:2] == [
        "agent_started",
        "dry_run_started",
    ]
    [charge] = _types(eng, by_agent["tests:dry_charger"], "would_send")
    assert charge["tool"] == "tree_charge" and charge["stopped"]
    [ended] = _types(eng, by_agent["tests:dry_charger"], "dry_run_ended")
    assert ended["stopped_at"] == 2
    assert (
        _types(eng, by_agent["tests:dry_notifier"], "dry_run_ended")[0]["output"] == "would notify"
    )
    assert not _types(eng, fork.run_id, "tool_invoked")  # no intent, no ledger claim
    assert eng.resume(fork.run_id).status == RunStatus.DRY_RUN  # final: nothing runs again
    assert eng.verify(fork.run_id).status == RunStatus.DRY_RUN  # its log replays
    with pytest.raises(UsageError, match="dry run that ended; there is nothing to abandon"):
        eng.abandon(fork.run_id)
    assert svc.requests == before
    assert eng.state(fork.run_id).status == RunStatus.DRY_RUN and RunStatus.DRY_RUN in FINAL


@both
def test_a_dry_run_fork_of_the_demo_charges_nothing(
    eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled demo forked at ``customer-loaded`` as a dry run, with its triage edited
    to another price: the charge is recorded as ``would_send`` with the edited amount, the
    fork stops there (its receipt cannot be made up), and the payment service holds the one
    charge the live run made."""
    monkeypatch.setenv(demo.WORLD_ENV, str(tmp_path / "payments.json"))
    ticket = demo.new_ticket()
    live = eng.run(demo.support_ticket, ticket=ticket)
    assert live.status == "completed" and len(demo.charges_for(ticket["order"])) == 1
    charges = demo.load_world()["charges"]

    # Unedited, the fork makes the parent's charge: the parent's receipt stands in for the
    # result it does not send, and the fork goes on to its end.
    fork = eng.rewind(live.run_id, to="customer-loaded", dry_run=True)
    assert (fork.status, fork.error) == (RunStatus.DRY_RUN, None)
    assert fork.output["charge"] == live.output["charge"]
    [would] = _types(eng, fork.run_id, "would_send")
    assert would["tool"] == "charge_card" and would["key"] == f"charge:{ticket['order']}"
    assert would["args"] == {"order_id": ticket["order"], "cents": 4900}
    assert not would["stopped"] and would["result"]["charge_id"] == live.output["charge"]
    assert eng.verify(fork.run_id).status == RunStatus.DRY_RUN

    # The triage edited to another price, forked where the charge came after it: a fork
    # past the charge would hide that the code now charges another amount, so it is refused.
    triage = {"action": "upgrade", "plan": "pro", "cents": 100, "why": "edited"}
    with pytest.raises(UsageError, match="forks at position"):
        eng.rewind(live.run_id, to="paid", set={"triage": triage}, dry_run=True)
    [at] = [e.position for e in eng.events(live.run_id) if e.data.get("name") == "triage"]
    edited = eng.rewind(live.run_id, to=at, set={"triage": triage}, dry_run=True)
    assert edited.status == RunStatus.DRY_RUN
    [would] = _types(eng, edited.run_id, "would_send")  # another charge: no receipt for it
    assert would["args"] == {"order_id": ticket["order"], "cents": 100} and would["stopped"]
    assert demo.load_world()["charges"] == charges  # nothing reached the payment service


@both
def test_a_dry_run_refuses_to_compensate(eng: Engine, svc: Loopback) -> None:
    """Compensating the parent's effects would reach the world: a dry run refuses it."""
    tree = Tree(eng, svc)
    live = eng.run(tree.parent, order="o2")
    with pytest.raises(UsageError, match="dry run undoes nothing"):
        eng.rewind(live.run_id, to="start", dry_run=True, effects="compensate")


@both
def test_a_dry_run_that_pauses_stays_dry_when_answered(eng: Engine, svc: Loopback) -> None:
    """A dry run forked before a question pauses there; its answer continues it as a dry
    run (nothing sent; the parent's receipt of the same charge stands in for its result),
    and a fork of a dry run is a dry run too (resending: None stands in, as declared)."""

    @eng.tool(side_effect=True, name="ask_charge")
    def charge(order: str, *, idempotency_key: str) -> dict[str, Any] | None:
        return _post(svc, order, idempotency_key)

    @eng.agent(name="tests:dry_asks")
    def asks(run: Any) -> str:
        run.checkpoint("start")
        if run.ask("charge?") == "yes":
            return "charged" if charge("o9") is not None else "would charge"
        return "declined"

    live = eng.run(asks)
    assert eng.answer(live.run_id, "yes").output == "charged" and len(svc.requests) == 1
    fork = eng.rewind(live.run_id, to="start", dry_run=True)
    assert fork.status == "paused"
    done = eng.answer(fork.run_id, "yes")  # the parent's receipt stands in for the charge
    assert (done.status, done.output) == (RunStatus.DRY_RUN, "charged")
    again = eng.rewind(fork.run_id, to="start", effects="resend")  # dry: its parent is
    assert eng.answer(again.run_id, "yes").output == "would charge"  # no receipt: None
    assert len(svc.requests) == 1


@both
def test_a_dry_run_posts_no_message_to_another_run(eng: Engine) -> None:
    """``run.send`` in a dry run posts nothing to the recipient's inbox: its would_send
    names ``run.send``, the recipient and the topic, and the fork's log replays."""

    @eng.agent(name="tests:dry_inbox")
    def inbox(run: Any) -> str:
        return str(run.ask("hold"))

    @eng.agent(name="tests:dry_sender")
    def sender(run: Any, to: str) -> str:
        run.checkpoint("start")
        run.send(to, "news", {"n": 1})
        return "sent"

    to = eng.run(inbox).run_id
    live = eng.run(sender, to=to)
    assert live.output == "sent" and len(list(posted(eng.store, to))) == 1
    fork = eng.rewind(live.run_id, to="start", dry_run=True)
    assert (fork.status, fork.output) == (RunStatus.DRY_RUN, "sent")
    assert len(list(posted(eng.store, to))) == 1
    [would] = _types(eng, fork.run_id, "would_send")
    assert would["tool"] == "run.send" and would["args"] == {
        "to": to,
        "topic": "news",
        "value": {"n": 1},
    }
    assert eng.verify(fork.run_id).status == RunStatus.DRY_RUN


@both
def test_each_parent_receipt_stands_in_once_across_a_pause(eng: Engine, svc: Loopback) -> None:
    """Two identical charges around a question: after the answer, the dry run's second
    charge takes the parent's second receipt, not the first again (the first would_send
    names the parent call it took, and a re-execution reads that from the log)."""

    @eng.tool(side_effect=True, name="twice_charge")
    def charge(order: str, *, idempotency_key: str) -> dict[str, Any]:
        return _post(svc, order, idempotency_key)

    @eng.agent(name="tests:dry_twice")
    def twice(run: Any) -> list[str]:
        run.checkpoint("start")
        first = charge("o5")
        run.ask("again?")
        return [first["receipt"], charge("o5")["receipt"]]

    live = eng.run(twice)
    done = eng.answer(live.run_id, "yes")
    assert len(svc.requests) == 2
    fork = eng.rewind(live.run_id, to="start", dry_run=True)
    assert eng.answer(fork.run_id, "yes").output == done.output
    first, second = _types(eng, fork.run_id, "would_send")
    assert first["parent_call"] != second["parent_call"] and len(svc.requests) == 2
