"""What opening a PostgreSQL store checks and brings up to date in its schema: whether the
store exists, a sequence that would break the readers' order, and columns an older
agentlog's tables lack (added once, by whichever opener sees them missing first)."""

from __future__ import annotations

from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import Composed

from ..errors import StoreUnavailable


def add_column(
    datastore: PostgresDatastore, table: str, column: str, alter: Composed, *then: Composed
) -> None:
    """Run ``alter`` (an ``ADD COLUMN IF NOT EXISTS``: a second opener's is a no-op), then
    ``then``, if the store's ``table`` has no ``column`` (a table an older agentlog made).
    Checked first: an ALTER would lock the table on every open, even a no-op one."""
    with datastore.transaction(commit=True) as c:
        c.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s AND column_name = %s",
            (datastore.schema, table, column),
        )
        if c.fetchone() is None:
            for statement in (alter, *then):
                c.execute(statement)


def refuse_caching_sequence(conn: psycopg.Connection[Any], name: str, schema: str) -> None:
    """Ids drawn from per-session caches (CACHE > 1) are not in the order the writers'
    barrier proves: a reader would pass ids a session still holds (:mod:`.postgres_append`)."""
    row = conn.execute(
        "SELECT cache_size FROM pg_sequences WHERE schemaname = %s "
        "AND sequencename = 'agentlog_events_notification_id_seq'",
        (schema,),
    ).fetchone()
    if row is not None and row[0] > 1:
        raise StoreUnavailable(
            f"{name}: the sequence {schema}.agentlog_events_notification_id_seq caches "
            f"{row[0]} ids per session; ALTER it to CACHE 1 and restart the writers"
        )


def has_events_table(conn: psycopg.Connection[Any], schema: str) -> bool:
    """Whether the schema holds the events table (a store already made there)."""
    row = conn.execute(
        "SELECT to_regclass(format('%%I.%%I', %s::text, 'agentlog_events'))", (schema,)
    ).fetchone()
    return row is not None and row[0] is not None
