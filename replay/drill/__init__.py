"""Fault drills: an agent run again and again in scratch stores, killed at failpoints and
at random, recovered the documented way, its effects counted (``agentlog drill``)."""

from .campaign import Report, Rto, drill
from .options import FAILPOINTS, Options, failpoint_names, failures, latencies

__all__ = [
    "FAILPOINTS",
    "Options",
    "Report",
    "Rto",
    "drill",
    "failpoint_names",
    "failures",
    "latencies",
]
