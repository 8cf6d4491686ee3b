"""``agentlog recover --watch``: recover pass after pass, each resumed run printed as it
is recovered, until SIGINT (Ctrl-C) or SIGTERM.

A signal between two passes stops at once; one during a pass lets the pass finish (a
run it resumes is not cut short) unless a second signal follows. Either way the command
exits 0. Between passes it sleeps ``interval`` seconds: a waiting run's timer is found
due within that, and a message posted by another process too (its sender also wakes
the recipient itself, so the watcher is the safety net)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import msgspec

from engine.polling import poll_until

from ..output import result_doc
from . import views

if TYPE_CHECKING:
    from engine import RunResult

    from .app import Session


class _Stopper:
    """Whether a stop was asked, and whether a pass is under way (not to be cut)."""

    def __init__(self) -> None:
        self.asked = False
        self.busy = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.busy and not self.asked:
            self.asked = True  # the pass finishes first
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        signals = (signal.SIGINT, signal.SIGTERM)
        before = {sig: signal.signal(sig, self.on_signal) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)


def watch(s: Session, interval: float) -> int:
    """Recover every ``interval`` seconds until a signal; exit status 0."""
    stop = _Stopper()
    with stop.installed(), contextlib.suppress(KeyboardInterrupt):
        if not s.as_json:
            s.out.line((f"recovering every {interval:g}s; Ctrl-C stops", "dim"))
            _flush(s)
        poll_until(lambda: _asked_after_pass(s, stop), None, first=interval, most=interval)
    return 0


def _asked_after_pass(s: Session, stop: _Stopper) -> bool:
    """One recover pass, not cut by a first signal; whether a stop was asked."""
    stop.busy = True
    _one_pass(s)
    stop.busy = False
    return stop.asked


def _one_pass(s: Session) -> None:
    for r in s.engine.recover():
        if s.as_json:  # one JSON document a line
            s.out.write(msgspec.json.encode(recovered_doc(r)).decode() + "\n")
        else:
            recovered_lines(s, r)
    _flush(s)


def recovered_doc(r: RunResult) -> dict[str, Any]:
    return {**result_doc(r), "not_resumed": r.not_resumed}


def recovered_lines(s: Session, r: RunResult) -> None:
    """A recovered run as people read it."""
    s.out.lines(views.result_rows(r))
    if r.not_resumed is not None and r.not_resumed != "held":
        s.out.line("  ", (r.error or "not resumed", "red"))


def _flush(s: Session) -> None:
    with contextlib.suppress(OSError, ValueError):
        s.out.stream.flush()
