"""Counting a text's tokens for a model's window: tiktoken's ``cl100k_base`` encoding when
tiktoken is installed, else an estimate of one token per 4 bytes of UTF-8, rounded up
(about what cl100k gives for English prose and JSON; an overestimate for plain words)."""

from __future__ import annotations

import functools
from collections.abc import Callable

BYTES_PER_TOKEN = 4


@functools.cache
def _encoder() -> Callable[[str], int] | None:
    try:
        import tiktoken  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    encoding = tiktoken.get_encoding("cl100k_base")
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def estimate(text: str) -> int:
    """The documented estimate: ceil(UTF-8 bytes / 4)."""
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def count_tokens(text: str) -> int:
    """``text``'s tokens: tiktoken's count if installed, else :func:`estimate`."""
    counter = _encoder()
    return counter(text) if counter is not None else estimate(text)
