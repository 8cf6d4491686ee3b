"""What the benchmark scripts share (the PostgreSQL URL, alternating order, the Markdown
table file, schema clean-up), and the parts of scripts/bench_log.py (``log_*`` modules).

The scripts run as ``python scripts/NAME.py``, so this folder is on ``sys.path`` and they
import ``benchkit`` as a top-level package.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

PG_URL = os.environ.get(
    "AGENTLOG_BENCH_POSTGRES_URL",
    os.environ.get(
        "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
    ),
)


def alternating(items: Sequence[T], repeat: int) -> list[T]:
    """``items`` in order on even repeats and reversed on odd ones, so that drift over a
    run (caches, the machine's other load) does not favour whatever is measured first."""
    return list(items) if repeat % 2 == 0 else list(reversed(items))


def write_table(path: str, title: str, doc: str | None, lines: list[str]) -> None:
    """Write a Markdown file: ``title``, the script's docstring, then the table ``lines``."""
    with open(path, "w") as f:
        head = f"# {title}\n\n" + (doc or "").strip() + "\n\n"
        f.write(head + "\n".join(lines) + "\n")


def write_block(path: str, name: str, body: str) -> None:
    """Replace the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in the
    Markdown file ``path`` with ``body`` (the rest of the page is kept as written)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{begin}\n{body}{end}{tail}")


def drop_schemas(pg_base: str, schemas: Sequence[str]) -> None:
    """Drop the benchmark's throw-away PostgreSQL schemas (and all they hold)."""
    import psycopg

    with psycopg.connect(pg_base, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
