"""Sagas on every store: ``engine.abandon`` undoes the run's own committed side effects in
reverse order (each undo recorded as compensation_started then compensated), never twice:
not when abandon is repeated, not when a crash interrupts an undo (re-sent only under its
``undo:<key>``, else abandon stops naming the effect), not after a failed undo is retried.
Undoing releases the business key; effects a crash left uncertain are verified first;
outcomes borrowed from the ledger are not the borrower's to undo; a completed run cannot
be abandoned. Real SIGKILLs in the middle of compensating are at the end (SQLite and
PostgreSQL: a memory store dies with its process)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agents import service
from agents.kit import ROOT, Crash, engine_call, log_of, python
from conftest import all_backends, backends

from engine import Engine
from engine.errors import UsageError

PROCESS_BACKENDS = backends("sqlite", "postgres")


class Books:
    """An outside service's books: effects by receipt, undo requests, voided receipts."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.undo_requests: list[tuple[str, str | None]] = []
        self.voided: Counter[str] = Counter()
        self.undo_keys: dict[str, str] = {}

    def perform(self, what: str) -> str:
        self.sent[what] += 1
        return f"R-{what}"

    def void(self, receipt: str, key: str | None = None) -> str:
        """Voids once per undo key (a real API dedupes by key); without a key, every
        request voids again (counted, so a double undo shows)."""
        self.undo_requests.append((receipt, key))
        if key is not None and key in self.undo_keys:
            return self.undo_keys[key]
        self.voided[receipt] += 1
        if key is not None:
            self.undo_keys[key] = f"V-{receipt}"
        return f"V-{receipt}"


def _compensations(eng: Engine, run_id: str) -> list[tuple[str, int]]:
    return [(t, d["call"]) for _, t, d in log_of(eng, run_id) if t.startswith("compensat")]


@all_backends
def test_abandon_undoes_committed_effects_in_reverse_order_each_recorded(eng: Engine) -> None:
    """Three effects with undo hooks (a business key and default keys), one effect
    without, one read-only call: abandon records compensation_started + compensated for
    each undoable effect, latest first, then agent_abandoned; a second abandon undoes
    nothing again."""
    books = Books()

    def undo(result: str, idempotency_key: str | None = None) -> str:
        return books.void(result, idempotency_key)

    @eng.tool(side_effect=True, key=lambda order: f"hold:{order}", compensate=undo)
    def hold(order: str, *, idempotency_key: str) -> str:
        return books.perform(f"hold-{order}")

    @eng.tool(side_effect=True, compensate=undo)
    def reserve(order: str, *, idempotency_key: str) -> str:
        return books.perform(f"reserve-{order}")

    @eng.tool(side_effect=True)
    def mail(order: str, *, idempotency_key: str) -> str:
        return books.perform(f"mail-{order}")

    @eng.tool
    def price(order: str) -> int:
        return 7

    @eng.tool(side_effect=True, compensate=lambda result: books.void(result))
    def charge(order: str, cents: int, *, idempotency_key: str) -> str:
        return books.perform(f"charge-{order}-{cents}")

    @eng.agent
    def booking(run: Any, order: str) -> Any:
        hold(order)  # call 1
        reserve(order)  # call 2
        mail(order)  # call 3: no undo
        charge(order, price(order))  # calls 4 (read-only) and 5
        return run.ask("confirm?")

    r = eng.run(booking, order="o1")
    assert r.status == "paused"
    gone = eng.abandon(r.run_id)
    assert (gone.status, gone.error) == ("abandoned", None)
    assert [receipt for receipt, _ in books.undo_requests] == [
        "R-charge-o1-7",
        "R-reserve-o1",
        "R-hold-o1",
    ]
    assert _compensations(eng, r.run_id) == [
        ("compensation_started", 5),
        ("compensated", 5),
        ("compensation_started", 2),
        ("compensated", 2),
        ("compensation_started", 1),
        ("compensated", 1),
    ]
    log = log_of(eng, r.run_id)
    started = [d for _, t, d in log if t == "compensation_started"]
    assert [d["key"] for d in started] == [f"{r.run_id}:5", f"{r.run_id}:2", "hold:o1"]
    done = [d for _, t, d in log if t == "compensated"]
    assert [d["result"] for d in done] == ["V-R-charge-o1-7", "V-R-reserve-o1", "V-R-hold-o1"]
    assert all(d.get("error") is None for d in done)
    assert log[-1][1] == "agent_abandoned"
    state = eng.state(r.run_id)
    assert (state.status, state.compensated, state.waiting) == ("abandoned", 3, None)
    # undo hooks declaring the key get "undo:<the effect's key>"
    assert dict(books.undo_requests)["R-hold-o1"] == "undo:hold:o1"
    assert dict(books.undo_requests)["R-charge-o1-7"] is None

    before = log_of(eng, r.run_id)
    assert eng.abandon(r.run_id).status == "abandoned"
    assert log_of(eng, r.run_id) == before
    assert len(books.undo_requests) == 3 and all(v == 1 for v in books.voided.values())
    assert eng.store.lease(r.run_id) is None


@all_backends
def test_abandon_of_a_crashed_or_failed_run_undoes_what_it_committed(eng: Engine) -> None:
    """A run killed mid-way (status running) and a run that failed are abandoned the same
    way: their committed effects undone in reverse order, once."""
    books = Books()
    mode = {"crash": True}

    @eng.tool(
        side_effect=True, compensate=lambda r, idempotency_key: books.void(r, idempotency_key)
    )
    def reserve(item: str, *, idempotency_key: str) -> str:
        return books.perform(item)

    @eng.tool(retry=None)
    def check(item: str) -> str:
        if mode["crash"]:
            raise Crash()
        raise PermissionError("not allowed")

    @eng.agent
    def shop(run: Any, tag: str) -> Any:
        return [reserve(f"{tag}-a"), reserve(f"{tag}-b"), check(tag)]

    with pytest.raises(Crash):
        eng.run(shop, run_id="crashed", tag="c")
    assert eng.state("crashed").status == "running"
    mode["crash"] = False
    failed = eng.run(shop, tag="f")
    assert failed.status == "failed"
    for rid in ("crashed", failed.run_id):
        assert eng.abandon(rid).status == "abandoned"
        assert [c for c, _ in _compensations(eng, rid)].count("compensated") == 2
    assert [receipt for receipt, _ in books.undo_requests] == [
        "R-c-b",
        "R-c-a",
        "R-f-b",
        "R-f-a",
    ]


@all_backends
def test_abandon_of_a_completed_run_is_a_usage_error_recording_nothing(eng: Engine) -> None:
    books = Books()

    @eng.tool(side_effect=True, compensate=lambda r: books.void(r))
    def reserve(item: str, *, idempotency_key: str) -> str:
        return books.perform(item)

    @eng.agent
    def quick(run: Any) -> str:
        return str(reserve("x"))

    r = eng.run(quick)
    assert r.status == "completed"
    before = log_of(eng, r.run_id)
    with pytest.raises(UsageError, match="completed"):
        eng.abandon(r.run_id)
    assert log_of(eng, r.run_id) == before
    assert books.undo_requests == [] and eng.state(r.run_id).status == "completed"


@all_backends
def test_compensating_releases_the_business_key_so_a_later_run_executes_again(
    eng: Engine,
) -> None:
    """A business key committed by an abandoned run is released by its undo: a later run
    with the same key executes the effect again (it is not served from the ledger)."""
    books = Books()

    @eng.tool(
        side_effect=True,
        key=lambda order: f"refund:{order}",
        compensate=lambda r, idempotency_key: books.void(r, idempotency_key),
    )
    def refund(order: str, *, idempotency_key: str) -> str:
        return books.perform(f"refund-{order}")

    @eng.agent
    def refunding(run: Any, order: str) -> Any:
        return [refund(order), run.ask("ok?")]

    first = eng.run(refunding, order="o5")
    other = eng.run(refunding, order="o5")  # the same key while committed: from the ledger
    sources = [d["source"] for _, t, d in log_of(eng, other.run_id) if t == "tool_succeeded"]
    assert sources == ["ledger"] and books.sent["refund-o5"] == 1
    assert eng.abandon(other.run_id).status == "abandoned"  # borrowed: nothing to undo
    assert books.undo_requests == []
    assert eng.abandon(first.run_id).status == "abandoned"
    assert books.undo_requests == [("R-refund-o5", "undo:refund:o5")]
    later = eng.run(refunding, order="o5")
    sources = [d["source"] for _, t, d in log_of(eng, later.run_id) if t == "tool_succeeded"]
    assert sources == ["executed"] and books.sent["refund-o5"] == 2


@all_backends
def test_outcomes_borrowed_from_the_ledger_are_not_compensated_by_the_borrower(
    eng: Engine,
) -> None:
    """Run B gets a shared fee from the ledger (source 'ledger'), plus an effect of its
    own: abandoning B undoes only its own effect; the fee stays until its owner A is
    abandoned."""
    books = Books()

    def undo(r: str, idempotency_key: str | None = None) -> str:
        return books.void(r, idempotency_key)

    @eng.tool(side_effect=True, key=lambda group: f"fee:{group}", compensate=undo)
    def fee(group: str, *, idempotency_key: str) -> str:
        return books.perform(f"fee-{group}")

    @eng.tool(side_effect=True, compensate=undo)
    def reserve(item: str, *, idempotency_key: str) -> str:
        return books.perform(item)

    @eng.agent
    def member(run: Any, group: str, item: str) -> Any:
        return [fee(group), reserve(item), run.ask("go?")]

    a = eng.run(member, group="g1", item="a")
    b = eng.run(member, group="g1", item="b")
    assert books.sent == {"fee-g1": 1, "a": 1, "b": 1}
    assert eng.abandon(b.run_id).status == "abandoned"
    assert books.undo_requests == [("R-b", f"undo:{b.run_id}:2")]
    assert _compensations(eng, b.run_id) == [("compensation_started", 2), ("compensated", 2)]
    assert eng.abandon(a.run_id).status == "abandoned"
    assert [r for r, _ in books.undo_requests] == ["R-b", "R-a", "R-fee-g1"]


@all_backends
def test_a_failing_undo_fails_the_run_naming_the_effect_and_abandon_retries_only_the_rest(
    eng: Engine,
) -> None:
    """The middle undo raises: abandon stops (status failed, the error names the tool and
    call), recording compensated with the error; the undo after it was not attempted.
    A later abandon retries that undo and goes on; nothing is undone twice."""
    books = Books()
    broken = {"on": True}

    def undo(r: str, idempotency_key: str | None = None) -> str:
        if broken["on"] and r == "R-b":
            raise PermissionError("void refused by the bank")
        return books.void(r, idempotency_key)

    @eng.tool(side_effect=True, compensate=undo)
    def reserve(item: str, *, idempotency_key: str) -> str:
        return books.perform(item)

    @eng.agent
    def three(run: Any) -> Any:
        return [reserve("a"), reserve("b"), reserve("c"), run.ask("go?")]

    r = eng.run(three)
    stuck = eng.abandon(r.run_id)
    assert stuck.status == "failed"
    assert stuck.error is not None
    assert "reserve" in stuck.error and "call 2" in stuck.error
    assert "void refused by the bank" in stuck.error
    state = eng.state(r.run_id)
    assert (state.status, state.error) == ("failed", stuck.error)
    errors = [d["error"] for _, t, d in log_of(eng, r.run_id) if t == "compensated"]
    assert errors[0] is None and "void refused" in errors[1]
    assert books.voided == {"R-c": 1}

    again = eng.abandon(r.run_id)  # still broken: the same effect is named again
    assert again.status == "failed" and "call 2" in str(again.error)
    assert books.voided == {"R-c": 1}

    broken["on"] = False
    done = eng.abandon(r.run_id)
    assert done.status == "abandoned"
    assert books.voided == {"R-c": 1, "R-b": 1, "R-a": 1}
    assert [rc for rc, _ in books.undo_requests] == ["R-c", "R-b", "R-a"]
    assert eng.abandon(r.run_id).status == "abandoned" and len(books.undo_requests) == 3


@all_backends
def test_an_interrupted_undo_declaring_the_key_is_resent_under_its_undo_key(
    eng: Engine,
) -> None:
    """A crash right after an undo ran (before compensated was recorded): the next abandon
    sends that undo again under the same 'undo:<key>' (the service dedupes it: voided
    once), then undoes the rest; nothing else is sent twice."""
    books = Books()
    crash = {"on": True}

    def undo(r: str, idempotency_key: str) -> str:
        out = books.void(r, idempotency_key)
        if crash["on"] and r == "R-b":
            raise Crash()  # the void went through; the process died before recording it
        return out

    @eng.tool(side_effect=True, compensate=undo)
    def reserve(item: str, *, idempotency_key: str) -> str:
        return books.perform(item)

    @eng.agent
    def three(run: Any) -> Any:
        return [reserve("a"), reserve("b"), reserve("c"), run.ask("go?")]

    r = eng.run(three)
    with pytest.raises(Crash):
        eng.abandon(r.run_id)
    assert _compensations(eng, r.run_id)[-1] == ("compensation_started", 2)
    assert eng.state(r.run_id).status == "paused"
    assert eng.store.lease(r.run_id) is None
    crash["on"] = False
    assert eng.abandon(r.run_id).status == "abandoned"
    keys = [k for _, k in books.undo_requests]
    assert keys == [
        f"undo:{r.run_id}:3",
        f"undo:{r.run_id}:2",
        f"undo:{r.run_id}:2",
        f"undo:{r.run_id}:1",
    ]
    assert books.voided == {"R-c": 1, "R-b": 1, "R-a": 1}


@all_backends
def test_an_interrupted_undo_without_the_key_stops_abandon_naming_the_effect(
    eng: Engine,
) -> None:
    """An undo hook that takes no idempotency key cannot be sent again safely: after a
    crash interrupted it, abandon fails naming the effect; abandoning again leaves it as
    it is and undoes the rest; nothing is undone twice. The same holds when the
    interrupted undo was itself a retry after a failed one."""
    books = Books()
    mode = {"fail": False, "crash": True}

    def undo(r: str) -> str:
        if mode["fail"] and r == "R-b":
            raise ConnectionError("bank unreachable")
        out = books.void(r)
        if mode["crash"] and r == "R-b":
            raise Crash()
        return out

    @eng.tool(side_effect=True, compensate=undo)
    def reserve(item: str, *, idempotency_key: str) -> str:
        return books.perform(item)

    @eng.agent
    def three(run: Any) -> Any:
        return [reserve("a"), reserve("b"), reserve("c"), run.ask("go?")]

    r = eng.run(three)
    with pytest.raises(Crash):
        eng.abandon(r.run_id)
    mode["crash"] = False
    stuck = eng.abandon(r.run_id)
    assert stuck.status == "failed"
    assert "reserve" in str(stuck.error) and "call 2" in str(stuck.error)
    assert "interrupted" in str(stuck.error)
    # Abandoning again (after a person checked) leaves R-b as it is and undoes R-a.
    assert eng.abandon(r.run_id).status == "abandoned"
    assert books.voided == {"R-c": 1, "R-b": 1, "R-a": 1}
    assert len(books.undo_requests) == 3

    # The retry-after-failure variant: the first undo of R-b fails, the retry is
    # interrupted by a crash, and the next abandon must not send it a third time.
    r2 = eng.run(three)
    mode.update(fail=True, crash=False)
    assert eng.abandon(r2.run_id).status == "failed"  # the undo of call 2 failed
    mode.update(fail=False, crash=True)
    with pytest.raises(Crash):
        eng.abandon(r2.run_id)  # its retry voided R-b, then the process died
    mode["crash"] = False
    stuck = eng.abandon(r2.run_id)
    assert stuck.status == "failed" and "interrupted" in str(stuck.error)
    assert books.voided == {"R-c": 2, "R-b": 2, "R-a": 1}  # never twice a run


@all_backends
def test_effects_left_uncertain_by_a_crash_are_verified_before_compensating(
    eng: Engine,
) -> None:
    """Two effects whose process died mid-call: the one the verifier finds is recorded as
    succeeded (source 'verified') and then undone; the one it does not find is not
    undone (it did not happen). An uncertain effect with an undo but no verifier stops
    abandon, naming it."""
    books = Books()
    landed: dict[str, str] = {}
    crash = {"on": True}

    def find(key: str) -> str | None:
        return landed.get(key)

    def undo(r: str, idempotency_key: str) -> str:
        return books.void(r, idempotency_key)

    @eng.tool(side_effect=True, verify=find, compensate=undo)
    def reserve(item: str, send: bool, *, idempotency_key: str) -> str:
        if send:
            landed[idempotency_key] = books.perform(item)
        if crash["on"]:
            raise Crash()
        return landed[idempotency_key]

    @eng.agent
    def one(run: Any, item: str, send: bool) -> Any:
        return reserve(item, send)

    with pytest.raises(Crash):
        eng.run(one, run_id="sent", item="s", send=True)
    with pytest.raises(Crash):
        eng.run(one, run_id="unsent", item="u", send=False)
    crash["on"] = False
    assert eng.abandon("sent").status == "abandoned"
    log = log_of(eng, "sent")
    types = [t for _, t, _ in log]
    assert types[-4:] == [
        "tool_succeeded",
        "compensation_started",
        "compensated",
        "agent_abandoned",
    ]
    assert [d["source"] for _, t, d in log if t == "tool_succeeded"] == ["verified"]
    assert books.undo_requests == [("R-s", "undo:sent:1")]
    assert eng.abandon("unsent").status == "abandoned"
    assert _compensations(eng, "unsent") == []
    assert len(books.undo_requests) == 1

    @eng.tool(side_effect=True, compensate=lambda r: books.void(r))
    def blind(item: str, *, idempotency_key: str) -> str:
        raise Crash()

    @eng.agent
    def unverifiable(run: Any) -> Any:
        return blind("z")

    with pytest.raises(Crash):
        eng.run(unverifiable, run_id="blind")
    stuck = eng.abandon("blind")
    assert stuck.status == "failed" and "blind" in str(stuck.error)
    assert "no verifier" in str(stuck.error)
    assert len(books.undo_requests) == 1
    # Abandoning again is the person's word: the unknowable effect is left as it is.
    assert eng.abandon("blind").status == "abandoned"
    assert len(books.undo_requests) == 1
    left = [d for _, t, d in log_of(eng, "blind") if t == "compensated"]
    assert len(left) == 1 and "left as it is" in str(left[0]["error"])


# --- real SIGKILLs in the middle of compensating -------------------------------------

ABANDON = "import sys; from engine import Engine; Engine.open(sys.argv[1]).abandon(sys.argv[2])"


def _paused_flow(url: str, svc: str, run_id: str) -> None:
    r = python(
        "-m",
        "tests.agents.runtime_agents",
        url,
        run_id,
        "durable_flow",
        '{"order": "k1", "n": 3, "confirm": true}',
        env={"AGENTLOG_TEST_SERVICE": svc},
    )
    assert r.returncode == 0, r.stderr[-2000:]


@PROCESS_BACKENDS
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_killed_in_compensation_resumes_compensating_without_undoing_anything_twice(
    store_url: str, tmp_path: Path, nth: int
) -> None:
    """A process abandoning a run is SIGKILLed (failpoint in_compensation:nth) after the
    nth undo reached the service but before it was recorded. A new process abandons
    again: the interrupted undo is re-sent under the same 'undo:<key>' (the service
    voids each receipt once), the undos already recorded are not sent again, the rest
    follow in reverse order; a third abandon sends nothing."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    env = {"AGENTLOG_TEST_SERVICE": svc}
    _paused_flow(store_url, svc, "kill-undo")
    p = python(
        "-c",
        ABANDON,
        store_url,
        "kill-undo",
        env={**env, "AGENTLOG_FAILPOINTS": f"in_compensation:{nth}"},
    )
    assert p.returncode == -9, p.stderr[-2000:]
    receipts = [f"charge:k1-{i}" for i in (2, 1, 0)]  # reverse order
    assert service.voids(svc) == set(receipts[:nth])

    r = engine_call(store_url, "abandon", "kill-undo", env=env)
    assert r["status"] == "abandoned", r
    assert service.voids(svc) == set(receipts)
    requests = service.requests(svc, kind="void")
    keys = {receipt: {k for _, rc, k in requests if rc == receipt} for receipt in receipts}
    assert all(len(k) == 1 for k in keys.values()), keys  # one undo key per effect
    assert keys["charge:k1-2"] == {"undo:kill-undo:4"}
    sent = Counter(rc for _, rc, _ in requests)
    assert sent == Counter({rc: 2 if i == nth - 1 else 1 for i, rc in enumerate(receipts)})
    e = Engine.open(store_url)
    try:
        done = [d["call"] for _, t, d in log_of(e, "kill-undo") if t == "compensated"]
        assert done == [4, 3, 2]
    finally:
        e.close()
    assert engine_call(store_url, "abandon", "kill-undo", env=env)["status"] == "abandoned"
    assert len(service.requests(svc, kind="void")) == len(requests)


UNKEYED = """
import sys
from engine import Engine
from tests.agents import service

engine = Engine.open()


def void(result):
    return service.void(result["receipt"])


@engine.tool(side_effect=True, compensate=void)
def book(op: str, *, idempotency_key: str) -> dict:
    return {"receipt": service.perform("book", op, idempotency_key)}


@engine.agent
def booking(run, n: int) -> list:
    return [book(f"b{i}")["receipt"] for i in range(n)] + [run.ask("go?")]


if __name__ == "__main__":
    e = Engine.open(sys.argv[1])
    if sys.argv[3] == "run":
        print(e.run(booking, run_id=sys.argv[2], n=3).status)
    else:
        r = e.abandon(sys.argv[2])
        print(r.status, r.error)
"""


@PROCESS_BACKENDS
def test_killed_in_an_undo_without_the_key_abandon_fails_naming_it_and_undoes_nothing_twice(
    store_url: str, tmp_path: Path
) -> None:
    """The undo hook takes no idempotency key: after a SIGKILL interrupted it, abandon (in
    another process) stops with status failed naming the effect; abandoning again leaves
    that one as it is and finishes; no receipt is voided twice."""
    svc = str(tmp_path / "service.db")
    service.reset(svc)
    script = tmp_path / "unkeyed.py"
    script.write_text(UNKEYED)
    env = {"AGENTLOG_TEST_SERVICE": svc, "PYTHONPATH": str(ROOT)}
    p = python(str(script), store_url, "unkeyed", "run", env=env)
    assert p.stdout.strip() == "paused", p.stderr[-2000:]
    p = python(
        str(script),
        store_url,
        "unkeyed",
        "abandon",
        env={**env, "AGENTLOG_FAILPOINTS": "in_compensation:2"},
    )
    assert p.returncode == -9, p.stderr[-2000:]
    p = python(str(script), store_url, "unkeyed", "abandon", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("failed ")
    assert "book" in p.stdout and "call 2" in p.stdout and "interrupted" in p.stdout
    # Abandoning again is the person's word that they checked: the unknowable undo is
    # left as it is (recorded so), the rest finishes, nothing is voided twice.
    p = python(str(script), store_url, "unkeyed", "abandon", env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("abandoned ")
    voids = Counter(rc for _, rc, _ in service.requests(svc, kind="void"))
    assert voids == Counter({"book:b2": 1, "book:b1": 1, "book:b0": 1})
    e = Engine.open(store_url)
    try:
        assert e.state("unkeyed").status == "abandoned"
        skipped = [v.data for v in e.events("unkeyed") if v.type == "compensated"]
        assert any("left as it is" in (d["error"] or "") and d["call"] == 2 for d in skipped)
    finally:
        e.close()
