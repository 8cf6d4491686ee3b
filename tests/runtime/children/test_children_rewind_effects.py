"""A parent's children count in a rewind, on SQLite and PostgreSQL: the effects of the
children the parent started after the fork position stand (deepest first) when the fork
takes another path, are compensated first (deepest first, each recorded in its own run,
named in ``RunResult.compensated``) by ``effects="compensate"``, and one that cannot be
undone stops the compensating rewind before anything is undone. The outside world is a
JSON file counting charges, emails and their undos."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import backends

from engine import Engine
from engine.errors import UsageError
from engine.log.subtree import standing
from replay.cli import views

TREE = backends("sqlite", "postgres")


def _child(eng: Engine, parent: str) -> str:
    [child] = [e.data["child_run_id"] for e in eng.events(parent) if e.type == "child_spawned"]
    return str(child)


def _short(tool: str) -> str:
    return tool.rsplit(".", 1)[-1]


class World:
    """A counting service: every send and every undo, in order, in a JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("[]")

    def log(self, what: str) -> None:
        self.path.write_text(json.dumps([*self.seen(), what]))

    def seen(self) -> list[str]:
        seen: list[str] = json.loads(self.path.read_text())
        return seen


def _bought(eng: Engine, tmp_path: Path, email_undo: bool = True) -> tuple[World, str]:
    """The world, and a completed parent that charged and whose child emailed; the next
    run of the shop (a fork) takes the other path and browses."""
    world = World(tmp_path / "world.json")
    shop, flag = _shop(eng, world, tmp_path, email_undo)
    parent = eng.run(shop)
    assert parent.status == "completed", parent.error
    flag.write_text("browse")
    return world, parent.run_id


def _shop(eng: Engine, world: World, tmp_path: Path, email_undo: bool, ask: bool = False) -> Any:
    flag = tmp_path / "path.txt"
    flag.write_text("buy")

    def refund(receipt: dict[str, str]) -> str:
        world.log(f"refund {receipt['order']}")
        return "refunded"

    def unsend(receipt: dict[str, str]) -> str:
        world.log(f"unsend {receipt['to']}")
        return "recalled"

    @eng.tool(side_effect=True, key=lambda order: f"charge:{order}", compensate=refund)
    def charge(order: str) -> dict[str, str]:
        world.log(f"charge {order}")
        return {"order": order}

    @eng.tool(side_effect=True, compensate=unsend if email_undo else None)
    def email(to: str) -> dict[str, str]:
        world.log(f"email {to}")
        return {"to": to}

    @eng.agent
    def mailer(run: Any, to: str) -> Any:
        return email(to)

    @eng.agent
    def shop(run: Any) -> Any:
        run.checkpoint("start")
        if run.decide("path", flag.read_text) != "buy":
            return "browsed"
        receipt = charge("o-1")
        done = [receipt, run.spawn(mailer, to="ada").result()]
        return run.ask("ship it?") if ask else done

    return shop, flag


@TREE
def test_a_fork_on_another_path_names_the_childs_effect_as_standing_deepest_first(
    eng: Engine, tmp_path: Path
) -> None:
    world, parent = _bought(eng, tmp_path)
    fork = eng.rewind(parent, "start")
    assert fork.output == "browsed"
    stands = [(_short(fx.tool), fx.run_id == parent) for fx in fork.standing]
    assert stands == [("email", False), ("charge", True)]  # the child's first
    assert standing(eng.store, fork.run_id) == list(fork.standing)
    assert world.seen() == ["charge o-1", "email ada"]


@TREE
def test_a_compensating_rewind_undoes_the_childs_effect_first_and_names_both(
    eng: Engine, tmp_path: Path
) -> None:
    world, parent = _bought(eng, tmp_path)
    child = _child(eng, parent)
    fork = eng.rewind(parent, "start", effects="compensate")
    assert fork.status == "completed" and fork.standing == ()
    assert [(_short(fx.tool), fx.run_id) for fx in fork.compensated] == [
        ("email", child),
        ("charge", parent),
    ]
    assert world.seen() == ["charge o-1", "email ada", "unsend ada", "refund o-1"]
    assert [e.type for e in eng.events(child)][-2:] == ["compensation_started", "compensated"]


@TREE
def test_a_childs_effect_without_compensation_stops_the_rewind_before_any_undo(
    eng: Engine, tmp_path: Path
) -> None:
    world, parent = _bought(eng, tmp_path, email_undo=False)
    with pytest.raises(
        UsageError, match=r"rewind stopped, nothing forked: \S*email .* no compensation"
    ):
        eng.rewind(parent, "start", effects="compensate")
    assert world.seen() == ["charge o-1", "email ada"]  # nothing undone
    # The parent's log shows no undo either.
    assert "compensation_started" not in [e.type for e in eng.events(parent)]


@TREE
def test_abandon_names_what_it_compensated_and_the_childs_effect_left_standing(
    eng: Engine, tmp_path: Path
) -> None:
    """Abandoning a paused parent refunds its charge; its completed child's email, which
    has no compensation, is named as still standing (``RunResult`` and the CLI's rows)."""
    world = World(tmp_path / "world.json")
    shop, _ = _shop(eng, world, tmp_path, email_undo=False, ask=True)
    paused = eng.run(shop)
    assert paused.status == "paused", paused.error
    [child] = [
        e.data["child_run_id"] for e in eng.events(paused.run_id) if e.type == "child_spawned"
    ]
    r = eng.abandon(paused.run_id)
    assert r.status == "abandoned"
    assert world.seen() == ["charge o-1", "email ada", "refund o-1"]
    assert [(_short(fx.tool), fx.run_id) for fx in r.compensated] == [("charge", paused.run_id)]
    assert [(_short(fx.tool), fx.run_id) for fx in r.standing] == [("email", child)]
    docs = views.effects_docs(r)
    assert [d["run_id"] for d in docs["standing"]] == [child]
    text = " ".join(str(p) for row in views.standing_rows(r.standing, "x") for p in row)
    assert f"run {child[:12]} call" in text
