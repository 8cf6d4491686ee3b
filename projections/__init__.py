"""Projections: views of the whole log, each built exactly once from the global order.

:mod:`projections.fold` says what a view is (a pure fold of events into rows),
:mod:`projections.runner` runs views over a store (catch up, follow, rebuild), and
:mod:`projections.views` holds the views: runs, tools, recovery, timeline.
"""

from .fold import Envelope, Projection, RunFacts
from .runner import Runner, ViewStatus

__all__ = ["Envelope", "Projection", "RunFacts", "Runner", "ViewStatus"]
