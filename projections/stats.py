"""The operator's figures (``engine.stats()``, ``agentlog stats``): runs by status, tools
and recovery, each read from its view after the view has caught up with the log.

This is the provider behind the ``agentlog.views`` entry point; the engine calls it with
``since`` already resolved to epoch seconds (or None: all of the log).
"""

from __future__ import annotations

import datetime as dt

from engine.stats import Stats
from engine.store import Store

from .objectives import objectives
from .runner import Runner
from .views import all_views, recovery, runs, tools


def stats(store: Store, since: float | None, agent: str | None) -> Stats:
    """The figures of runs started at or after ``since`` (None: all), of ``agent``
    (``module:qualname``; None: every agent). Every view catches up in one pass over the
    log first (the timeline view too), and the sections are read at that one position
    (``objectives`` also reads the snapshots of unsettled runs with an RPO target). Tool
    figures are of whole hours: ``tools_since`` says from when."""
    Runner(store, all_views()).catch_up()
    crashes = recovery.rows(store, since, agent)
    return Stats(
        since=iso_utc(since),
        runs=runs.counts(store, since, agent, catch_up=False),
        tools=tools.summarize(store, since, agent, catch_up=False),
        recovery=recovery.figures(crashes),
        agent=agent,
        tools_since=None if since is None else iso_utc(tools.window_of(since)),
        objectives=objectives(store, crashes),
    )


def iso_utc(epoch: float | None) -> str | None:
    """Epoch seconds as ISO-8601 in UTC with a ``Z`` (``2026-12-01T15:00:00Z``); None
    stays None. Fractions of a second are kept when there are any."""
    if epoch is None:
        return None
    moment = dt.datetime.fromtimestamp(epoch, tz=dt.UTC)
    text = moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds")
    return text.replace("+00:00", "Z")
