"""What model calls use (tokens in and out, cost) and the budget a run may spend.

A decision's usage is read from its result when the result reports it the way model SDKs
do (a ``usage`` attribute or key with ``input_tokens``/``output_tokens``, or OpenAI's
``prompt_tokens``/``completion_tokens``), or given by ``run.usage(...)``. Nothing here does
I/O: the runtime records usage with the decision and checks the budget as the run goes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import BudgetExhausted, UsageError


class Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Tokens in and out, and the cost (in the caller's currency), summed as calls report."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def __add__(self, other: Usage) -> Usage:
        if self.cost is None and other.cost is None:
            cost = None
        else:
            cost = (self.cost or 0.0) + (other.cost or 0.0)
        return Usage(self.tokens_in + other.tokens_in, self.tokens_out + other.tokens_out, cost)

    def __bool__(self) -> bool:
        return bool(self.tokens_in or self.tokens_out or self.cost)


NONE = Usage()
MAX_COUNT = 2**53  # what a count or a cost may be (exact in a float, and recordable)


def usage(tokens_in: Any, tokens_out: Any, cost: Any = None) -> Usage:
    """A usage from what a caller says (UsageError for counts that are not counts)."""
    for name, n in (("tokens_in", tokens_in), ("tokens_out", tokens_out)):
        if not is_count(n):
            raise UsageError(f"run.usage: {name} must be an int >= 0, not {n!r}")
    if cost is not None and not is_amount(cost):
        raise UsageError(f"run.usage: cost must be a number >= 0, not {cost!r}")
    return Usage(tokens_in, tokens_out, None if cost is None else float(cost))


def is_count(n: Any) -> bool:
    """A count of tokens: a whole number from 0, small enough to record."""
    return isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_COUNT


def is_amount(x: Any) -> bool:
    """A cost: a finite number from 0, small enough to record."""
    ok = isinstance(x, int | float) and not isinstance(x, bool)
    return ok and math.isfinite(x) and 0 <= x < MAX_COUNT


class Budget(msgspec.Struct, frozen=True):
    """What one run may spend on model calls: ``tokens`` (in + out) and/or ``cost``.
    Past it the run fails with ``BudgetExhausted``; a resume counts from the log."""

    tokens: int | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost is None:
            raise UsageError("Budget needs tokens= or cost=")
        if self.tokens is not None and not is_count(self.tokens):
            raise UsageError(f"Budget tokens must be an int >= 0, not {self.tokens!r}")
        if self.cost is not None and not is_amount(self.cost):
            raise UsageError(f"Budget cost must be a number >= 0, not {self.cost!r}")

    def over(self, spent: Usage) -> str | None:
        """What ``spent`` went past, if it did."""
        if self.tokens is not None and spent.tokens > self.tokens:
            return f"{spent.tokens} tokens of a budget of {self.tokens}"
        if self.cost is not None and (spent.cost or 0.0) > self.cost:
            return f"a cost of {spent.cost:g} of a budget of {self.cost:g}"
        return None

    def spent_all(self, spent: Usage) -> str | None:
        """What ``spent`` used up entirely (no model call may start), if anything."""
        if self.tokens is not None and spent.tokens >= self.tokens:
            return f"all {self.tokens} tokens of its budget"
        if self.cost is not None and (spent.cost or 0.0) >= self.cost:
            return f"all of its cost budget of {self.cost:g}"
        return None


def check(budget: Budget | None, spent: Usage, run_id: str, *, starting: bool) -> None:
    """Raise ``BudgetExhausted`` if ``spent`` went past ``budget`` (``starting``: a model
    call is about to start, so a budget used up exactly refuses it too)."""
    if budget is None:
        return
    what = budget.spent_all(spent) if starting else budget.over(spent)
    if what is not None:
        raise BudgetExhausted(f"run {run_id} used {what}")


def usage_of(result: Any) -> Usage | None:
    """The usage ``result`` reports, as model SDKs and pydantic-ai do; None if none."""
    reported = _field(result, "usage")
    if reported is None:
        return None
    tin = _count(reported, "input_tokens", "prompt_tokens")
    tout = _count(reported, "output_tokens", "completion_tokens")
    cost = _field(reported, "cost")
    cost = float(cost) if is_amount(cost) else None
    if tin is None and tout is None and cost is None:
        return None
    return Usage(tin or 0, tout or 0, cost)


def _count(obj: Any, *names: str) -> int | None:
    for name in names:
        n = _field(obj, name)
        if is_count(n):
            return int(n)  # an absurd count is no count: it could not even be recorded
    return None


def _field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else its attribute ``name``; None if absent (a property
    that raises is absent: a result's getters may do anything)."""
    try:
        if isinstance(obj, Mapping):
            return obj.get(name)
        return getattr(obj, name, None)
    except Exception:
        return None


__all__ = ["NONE", "Budget", "Usage", "check", "usage", "usage_of"]
