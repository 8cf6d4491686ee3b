"""The supervisor's pure decision (engine.policy.supervision.decide) and the parent's family read
from its log (family), as properties: escalation exactly past the restart intensity
(restarts older than the window do not count, an episode of several restarts counts
once), one_for_one restarts the failed child alone (resumed unless abandoned),
one_for_all every child whose result the parent has not taken, rest_for_one those of
them spawned after the failed one; the failed child always; spawn order kept."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import events as ev
from engine.policy.supervision import Child, Restart, Supervisor, decide, family, recent

strategies = st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"])
supervisors = st.builds(
    Supervisor,
    strategy=strategies,
    max_restarts=st.integers(0, 5),
    within=st.floats(1.0, 100.0, allow_nan=False),
)


@st.composite
def families(draw: st.DrawFn) -> tuple[list[Child], Child]:
    """Children in spawn order (calls increasing, some settled) and the one that failed."""
    n = draw(st.integers(1, 8))
    calls = sorted(draw(st.sets(st.integers(1, 100), min_size=n, max_size=n)))
    kids = [
        Child(call, f"run-{call}", order, draw(st.booleans())) for order, call in enumerate(calls)
    ]
    return kids, draw(st.sampled_from(kids))


@settings(max_examples=300, deadline=None)
@given(
    sup=supervisors,
    fam=families(),
    history=st.lists(st.floats(0.0, 200.0, allow_nan=False), max_size=8),
    at=st.floats(100.0, 300.0, allow_nan=False),
    abandoned=st.booleans(),
)
def test_decision_properties(
    sup: Supervisor,
    fam: tuple[list[Child], Child],
    history: list[float],
    at: float,
    abandoned: bool,
) -> None:
    kids, failed = fam
    d = decide(sup, history, at, failed, kids, abandoned)
    in_window = len({t for t in history if at - sup.within < t <= at})
    assert d.escalate == (in_window + 1 > sup.max_restarts)
    if d.escalate:
        assert d.restarts == () and d.count == in_window
        return
    assert d.count == in_window + 1
    calls = [r.call for r in d.restarts]
    assert calls == sorted(calls, key=lambda c: next(k.order for k in kids if k.call == c))
    assert failed.call in calls
    by_call = {k.call: k for k in kids}
    assert all(by_call[r.call].run_id == r.run_id for r in d.restarts)
    if sup.strategy == "one_for_one":
        assert d.restarts == (Restart(failed.call, failed.run_id, resume=not abandoned),)
        return
    assert not any(r.resume for r in d.restarts)  # the group starts afresh
    others = {k.call for k in kids if not k.settled and k.call != failed.call}
    if sup.strategy == "rest_for_one":
        others = {c for c in others if by_call[c].order > failed.order}
    assert set(calls) == others | {failed.call}


@given(sup=supervisors, fam=families(), at=st.floats(100.0, 300.0, allow_nan=False))
def test_rest_for_one_restarts_a_subset_of_one_for_all(
    sup: Supervisor, fam: tuple[list[Child], Child], at: float
) -> None:
    kids, failed = fam
    rest = decide(Supervisor("rest_for_one", sup.max_restarts, sup.within), [], at, failed, kids)
    every = decide(Supervisor("one_for_all", sup.max_restarts, sup.within), [], at, failed, kids)
    assert set(rest.restarts) <= set(every.restarts)


def test_intensity_window_edges() -> None:
    """A restart exactly ``within`` seconds before does not count; one just inside does;
    one episode recorded as several restarts (one time) counts once."""
    sup = Supervisor("one_for_one", max_restarts=1, within=10.0)
    kid = Child(1, "a", 0)
    assert not decide(sup, [90.0], 100.0, kid, [kid]).escalate
    assert decide(sup, [90.5], 100.0, kid, [kid]).escalate
    assert recent(sup, [95.0, 95.0, 95.0], 100.0) == 1
    assert decide(Supervisor(max_restarts=0), [], 0.0, kid, [kid]).escalate


def _spawned(call: int, child: str) -> ev.ChildSpawned:
    return ev.ChildSpawned(at=1.0, call=call, child_run_id=child, agent="m:w")


def _restarted(call: int, child: str, previous: str, at: float) -> ev.ChildRestarted:
    return ev.ChildRestarted(
        at=at, call=call, child_run_id=child, previous_run_id=previous, strategy="s", reason="r"
    )


def _finished(call: int, child: str, status: str) -> ev.ChildFinished:
    return ev.ChildFinished(at=2.0, call=call, child_run_id=child, status=status)


def test_family_repoints_restarted_children_and_groups_episodes() -> None:
    events: list[ev.Event] = [
        _spawned(2, "a"),
        _spawned(5, "b"),
        _finished(2, "a", "completed"),
        _finished(5, "b", "failed"),
        _restarted(5, "b2", "b", at=10.0),
        _restarted(2, "a2", "a", at=10.0),  # the same episode (one_for_all)
        _finished(2, "a", "failed"),  # an older child's end: not the current one's
        _spawned(7, "c"),
        _finished(7, "c", "completed"),
        _restarted(7, "c", "c", at=20.0),
    ]
    fam = family(events)
    assert fam.children == (
        Child(2, "a2", 0, settled=False),
        Child(5, "b2", 1, settled=False),
        Child(7, "c", 2, settled=False),
    )
    assert fam.episodes == (10.0, 20.0)
    assert family(events[:4]).children[0].settled
    assert fam.child(5) == Child(5, "b2", 1) and fam.child(3) is None


@given(
    st.lists(
        st.tuples(st.sampled_from(["spawn", "finish", "fail", "restart"]), st.integers(1, 4)),
        max_size=30,
    )
)
def test_family_tracks_the_latest_child_of_each_call(ops: list[tuple[str, int]]) -> None:
    """Whatever the order of records, each call's child is the one its latest spawn or
    restart named, settled only by a completed end of that very child."""
    events: list[ev.Event] = []
    model: dict[int, tuple[str, bool]] = {}
    order: list[int] = []
    for i, (op, call) in enumerate(ops):
        current = model.get(call)
        if op == "spawn" and current is None:
            events.append(_spawned(call, f"c{call}-{i}"))
            model[call] = (f"c{call}-{i}", False)
            order.append(call)
        elif current is not None and op == "restart":
            events.append(_restarted(call, f"c{call}-{i}", current[0], at=float(i)))
            model[call] = (f"c{call}-{i}", False)
        elif current is not None and op in ("finish", "fail"):
            status = "completed" if op == "finish" else "failed"
            events.append(_finished(call, current[0], status))
            model[call] = (current[0], op == "finish")
    fam = family(events)
    assert [c.call for c in fam.children] == order
    assert {c.call: (c.run_id, c.settled) for c in fam.children} == model
