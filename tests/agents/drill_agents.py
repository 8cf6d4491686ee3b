"""Agents for ``agentlog drill``: ``careful`` (its payment takes its key and has a verifier,
against a sandbox that dedupes by key) and ``careless`` (its mail ignores the key and has no
verifier). The sandbox is a directory of files, one line per effect."""

from __future__ import annotations

import os
from pathlib import Path

from engine import Engine

engine = Engine.open()


def _lines(box: str, name: str) -> list[str]:
    path = Path(box) / name
    return path.read_text().splitlines() if path.exists() else []


def _append(box: str, name: str, line: str) -> None:
    with open(Path(box) / name, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _paid(key: str) -> dict[str, str] | None:
    box = os.environ["DRILL_SANDBOX"]
    return {"receipt": key} if key in _lines(box, "payments") else None


@engine.tool
def price(order: str) -> int:
    return 100 + len(order)


@engine.tool(side_effect=True, verify=_paid)
def charge(order: str, cents: int, *, idempotency_key: str) -> dict[str, str]:
    box = os.environ["DRILL_SANDBOX"]
    if idempotency_key not in _lines(box, "payments"):  # the sandbox dedupes by key
        _append(box, "payments", idempotency_key)
    return {"receipt": idempotency_key}


@engine.tool(side_effect=True)
def send_mail(to: str) -> dict[str, str]:
    _append(os.environ["DRILL_SANDBOX"], "mail", to)
    return {"sent": to}


@engine.agent
def careful(run, order: str) -> dict[str, object]:
    cents = price(order)
    receipt = charge(order, cents)
    run.checkpoint("charged")
    return {"order": order, "cents": cents, "paid": bool(receipt)}


@engine.agent
def careless(run, to: str) -> dict[str, object]:
    send_mail(to)
    return {"mailed": to}


@engine.agent
def team(run, orders: list[str]) -> list[object]:
    """A tree: a child run per order, each charging it (``careful``)."""
    kids = [run.spawn(careful, order=o) for o in orders]
    return list(run.gather(*kids))
