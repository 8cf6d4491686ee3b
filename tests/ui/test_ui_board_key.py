"""The runs board filtered by business key (``/?key=``, as ``agentlog runs --key``): the
runs that claimed it, each once, oldest claim first; no other filter beside it."""

from __future__ import annotations

from conftest import backends
from ui_kit import client, main_text

from engine import Engine
from tests.agents import ui_agents


@backends("sqlite", "postgres")
def test_the_board_by_business_key_lists_the_runs_that_claimed_it(eng: Engine) -> None:
    """The first run's claim compensated, a second run claims the key again: both are
    listed, the first claim first; a run of another key is not."""
    first = eng.run(ui_agents.booking, order="A").run_id
    eng.abandon(first)
    second = eng.run(ui_agents.booking, order="A").run_id
    other = eng.run(ui_agents.booking, order="B").run_id
    c = client(eng)
    r = c.get("/", params={"key": "hold:A"})
    assert r.status_code == 200
    assert f'data-run="{other}"' not in r.text
    assert r.text.index(f'data-run="{first}"') < r.text.index(f'data-run="{second}"')
    assert 'name="key" value="hold:A"' in r.text  # the filter stays in its field
    paged = c.get("/", params={"key": "hold:A", "limit": "1", "offset": "1"})
    assert f'data-run="{second}"' in paged.text and f'data-run="{first}"' not in paged.text
    none = c.get("/", params={"key": "<b>never-claimed</b>"})
    assert none.status_code == 200 and "no runs match" in none.text
    assert "<b>never-claimed" not in none.text and "&lt;b&gt;never-claimed" in none.text


def test_a_key_with_another_filter_or_too_long_is_a_400(eng: Engine) -> None:
    c = client(eng)
    for query, says in [
        ({"key": "k", "status": "paused"}, "no other filter"),
        ({"key": "k", "agent": "a:b"}, "no other filter"),
        ({"key": "k" * 1001}, "1 to 1000 characters"),
    ]:
        r = c.get("/", params=query)
        assert r.status_code == 400 and says in main_text(r.text), query
