"""Sagas across forks: each effect is undone by the run that made it, once."""

from __future__ import annotations

from conftest import all_backends


@all_backends
def test_abandoning_a_fork_and_its_parent_undoes_each_effect_once(store_url: str) -> None:
    """A fork inherits its parent's recorded effects but does not own them: abandoning the
    fork undoes only the effects it made itself, the parent's abandon undoes the rest."""
    from collections import Counter

    from engine import Engine

    engine = Engine.open(store_url)
    undone: Counter[str] = Counter()

    def undo(result: dict[str, str]) -> str:
        undone[result["order"]] += 1
        return "voided"

    @engine.tool(side_effect=True, compensate=undo, name="fork_saga_charge")
    def charge(order: str) -> dict[str, str]:
        return {"order": order}

    @engine.agent(name="tests:fork_saga_agent")
    def agent(run: object, order: str) -> str:
        charge(order)
        run.checkpoint("charged")  # type: ignore[attr-defined]
        charge(order + "-extra")
        return str(run.ask("ok?"))  # type: ignore[attr-defined]

    parent = engine.run(agent, order="o1")
    fork = engine.rewind(parent.run_id, to="charged")
    assert (parent.status, fork.status) == ("paused", "paused")
    assert engine.abandon(fork.run_id).status == "abandoned"
    assert undone == Counter({"o1-extra": 1})  # only the fork's own charge
    assert engine.abandon(parent.run_id).status == "abandoned"
    assert undone == Counter({"o1-extra": 2, "o1": 1})  # each charge undone exactly once
