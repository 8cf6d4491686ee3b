"""The tools view (placeholder: its fold is being written)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from ..fold import Envelope, Projection


class Row(msgspec.Struct, frozen=True):
    key: str


class View(Projection[Row]):
    name = "tools"
    version = "0"
    row = Row

    def keys(self, env: Envelope) -> Sequence[str]:
        return ()

    def apply(self, rows: Mapping[str, Row | None], env: Envelope) -> Mapping[str, Row | None]:
        return {}
