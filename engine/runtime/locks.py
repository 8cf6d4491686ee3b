"""Cross-agent locks with fencing tokens. (Placeholder of the session's first phase.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import RunContext


@contextlib.contextmanager
def lock(ctx: RunContext, name: str, ttl: float) -> Iterator[int]:
    raise NotImplementedError
    yield 0
