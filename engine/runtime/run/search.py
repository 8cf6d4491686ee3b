"""The runs a filter picks from the run index (status, agent, start time, input text),
newest first: what ``agentlog runs --input-contains`` lists and the bulk ``resume``,
``abandon`` and ``verify --status`` act on. A filter is a list of small tests on an index
row (``RunQuery.tests``): a new filter is one more test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from ...errors import UsageError
from ...log.history import started
from ...secrets import redact
from ...store import RunRow, Store

MAX_TEXT = 1000  # --input-contains: longer text is refused, not searched for
_json = msgspec.json.Encoder()

Test = Callable[[RunRow], bool]


@dataclass(frozen=True)
class RunQuery:
    """Which runs: of ``status``, of ``agent`` (``module:qualname``), started at or after
    ``since`` (epoch seconds), whose input holds ``input_contains``. None: any."""

    status: str | None = None
    agent: str | None = None
    since: float | None = None
    input_contains: str | None = None

    def tests(self, store: Store) -> list[Test]:
        """The tests a row must pass, cheapest first (the input is read from the log)."""
        tests: list[Test] = []
        agent, since, text = self.agent, self.since, self.input_contains
        if agent is not None:
            tests.append(lambda r: r.agent == agent)
        if since is not None:
            tests.append(lambda r: r.started_at >= since)
        if text is not None:
            wanted = checked_text(text)
            tests.append(lambda r: input_holds(store, r.run_id, wanted))
        return tests


def select(store: Store, query: RunQuery) -> list[RunRow]:
    """The index rows ``query`` picks, newest first."""
    rows = store.runs(query.status)
    for test in query.tests(store):
        rows = [r for r in rows if test(r)]
    return rows


def checked_text(text: str) -> str:
    """The text an input search looks for: not empty, not absurdly long."""
    if not text:
        raise UsageError("--input-contains needs some text to look for")
    if len(text) > MAX_TEXT:
        raise UsageError(f"--input-contains takes at most {MAX_TEXT} characters")
    return text


def input_holds(store: Store, run_id: str, text: str) -> bool:
    """Whether the run's input, as users may see it (secret-named fields redacted), holds
    ``text``: in its compact JSON form or in one of its strings (keys included)."""
    shown = redact(started(store, run_id).input)
    if text in _json.encode(shown).decode():
        return True
    return any(text in s for s in _strings(shown))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)
