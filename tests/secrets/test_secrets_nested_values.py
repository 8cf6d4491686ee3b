"""Two secret values of one run where one holds the other (a token and a longer key that
begins with it): text quoting the longer is masked whole, not as the shorter's mask
followed by the rest of the longer, in the masking itself and in everything a run stores
on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

from agents.kit import stored_bytes
from conftest import backends

from engine import Engine, Permanent
from engine.secrets import MASK, Seen


def _nested() -> tuple[str, str, str]:
    """A short secret, a longer one that begins with it, and the longer one's rest."""
    short = f"tok-{uuid.uuid4().hex[:12]}"
    rest = f"rest-{uuid.uuid4().hex}"
    return short, short + rest, rest


def test_the_longer_of_two_nested_secrets_is_masked_whole() -> None:
    """Whichever was seen first, a text quoting the longer value keeps none of it, and
    one quoting the shorter alone masks just that."""
    short, long, rest = _nested()
    for order in ((short, long), (long, short)):
        seen = Seen()
        for value in order:
            seen.add(value)
        assert seen.mask(f"key={long};") == f"key={MASK};"
        assert seen.mask(f"key={short};") == f"key={MASK};"
        assert rest not in seen.mask_all({"note": [f"sent {long}"]})


@backends("sqlite", "postgres")
def test_a_run_stores_no_part_of_the_longer_nested_secret(eng: Engine, store_url: str) -> None:
    """A tool returns a token and an api key that extends it, and a note and an error
    message quoting the key: the run's output, its events and the stored bytes hold no
    part of the key past the token."""
    short, long, rest = _nested()

    @eng.tool
    def credentials() -> dict[str, str]:
        return {"token": short, "api_key": long, "note": f"issued {long} for you"}

    @eng.tool
    def use(note: str) -> str:
        raise ValueError(f"the service refused {long}")

    @eng.agent
    def agent(run: Any) -> dict[str, Any]:
        got = credentials()
        try:
            use(got["note"])
        except Permanent as e:  # a ValueError is a permanent failure
            return {"note": got["note"], "error": str(e)}
        return {}

    r = eng.run(agent)
    assert r.status == "completed"
    assert r.output["note"] == f"issued {MASK} for you"
    assert r.output["error"].endswith(f"ValueError: the service refused {MASK}")
    events = repr([e.data for e in eng.events(r.run_id)])
    assert rest not in events and short not in events
    assert rest.encode() not in stored_bytes(store_url, eng)
