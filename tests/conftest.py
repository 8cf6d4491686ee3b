"""Shared fixtures: one store per backend; PostgreSQL isolated in a schema per test module."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent

from engine import Engine, EngineConfig
from engine.store import Store, open_store

pytest_plugins = ["pytester"]  # test_postgres_marks runs small suites of its own

# A suite started in the background of a non-interactive shell (`.ci/run &`) inherits
# SIGINT ignored, and so would every CLI process it starts: the tests that stop one with
# Ctrl-C (SIGINT) need it delivered, so the processes they start get the default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

PG_URL = os.environ.get(
    "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
)
BACKENDS = ["memory", "sqlite", "postgres"]


def _schema_for(request: pytest.FixtureRequest) -> str:
    mod = re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1])[:30]
    return f"t_{mod}_{uuid.uuid4().hex[:8]}"


def drop_schema(schema: str) -> None:
    with psycopg.connect(PG_URL.split("?")[0], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


_SAVED_ENV: list[dict[str, str | None]] = []


def pytest_configure(config: pytest.Config) -> None:
    """The replay key file goes to a directory of this session, never the real home, and
    a developer's ``AGENTLOG_SECRET_KEY`` is not used: set before collection, since some
    test modules run agents as they are imported; subprocesses inherit it (a test that
    wants its own key sets XDG_CONFIG_HOME or AGENTLOG_SECRET_KEY itself)."""
    _SAVED_ENV.append({k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "AGENTLOG_SECRET_KEY")})
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="agentlog-config-")
    os.environ.pop("AGENTLOG_SECRET_KEY", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(os.environ.get("XDG_CONFIG_HOME", ""), ignore_errors=True)
    for name, value in _SAVED_ENV.pop().items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL URL whose schema belongs to this test alone (dropped afterwards).

    A test that reaches PostgreSQL must be marked ``postgres`` (so ``-m "not postgres"``
    skips it): one that is not fails here, however it asked for the URL."""
    if request.node.get_closest_marker("postgres") is None:
        pytest.fail(f"{request.node.nodeid} uses PostgreSQL but is not marked postgres")
    schema = _schema_for(request)
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}schema={schema}"
    drop_schema(schema)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A fresh store URL of the backend named by the test's ``backend`` parameter."""
    backend = getattr(request, "param", "sqlite")
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/agentlog.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.close()


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    """An engine on this test's store (a SQLite file unless the test is parametrised with
    ``backends``/``all_backends``), closed after the test. A module that needs other
    settings (a fake clock) overrides this fixture."""
    e = Engine.open(store_url)
    yield e
    e.close()


def engine_with(store_url: str, **settings: Any) -> Iterator[Engine]:
    """An engine on ``store_url`` built with ``EngineConfig(**settings)``, closed after
    (for a module's ``eng`` fixture: ``yield from engine_with(store_url, inline_wait=0)``)."""
    e = Engine(store_url, config=EngineConfig(**settings))
    yield e
    e.close()


def backends(*names: str) -> pytest.MarkDecorator:
    """Parametrise a test's ``store_url`` over the named backends; the PostgreSQL case is
    marked ``postgres``."""
    params = [pytest.param(n, marks=pytest.mark.postgres) if n == "postgres" else n for n in names]
    return pytest.mark.parametrize("store_url", params, indirect=True)


all_backends = backends(*BACKENDS)
"""Parametrise a test over memory, SQLite and PostgreSQL stores."""


def unmarked_postgres(items: list[pytest.Item]) -> list[str]:
    """The ids of collected tests that use PostgreSQL (the ``pg_url`` fixture, or a
    ``postgres`` parameter) without the ``postgres`` mark."""
    out = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        uses = "pg_url" in getattr(item, "fixturenames", ()) or "postgres" in params
        if uses and item.get_closest_marker("postgres") is None:
            out.append(item.nodeid)
    return out


def _starts_processes(item: pytest.Item) -> bool:
    """The test's module starts processes (the CLI, agents to kill): ``scripts/test
    --quick`` leaves those out."""
    module = getattr(item, "module", None)
    names = vars(module) if module is not None else {}
    return "subprocess" in names or any(
        getattr(v, "__module__", "") == "test_cli_kit" for v in names.values()
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects anything
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = unmarked_postgres(items)
    if unmarked:
        raise pytest.UsageError(
            "tests use PostgreSQL without the postgres mark: " + ", ".join(unmarked)
        )
    for item in items:
        if _starts_processes(item):
            item.add_marker(pytest.mark.processes)
    # The campaigns (a minute each) first: the workers start on them together and share
    # the short tests after, instead of one worker running a campaign alone at the end.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# --- raw rows, for tests that plant old-schema or corrupt data behind the store's back ---

_TABLES = {
    "events": "agentlog_events",
    "snapshots": "agentlog_snapshots",
    "blobs": "agentlog_blobs",
}


def write_raw_row(
    store_url: str,
    store: Store,
    table: str,
    stream: uuid.UUID,
    position: int,
    topic: str,
    data: bytes,
) -> None:
    """Insert or overwrite one row of ``table`` (events, snapshots, blobs), bypassing the codec.

    SQLite and PostgreSQL rows are written with sqlite3 / psycopg directly; the memory
    store's row is replaced inside its recorder. Only for planting test data.
    """
    name = _TABLES[table]
    if store_url.startswith("memory"):
        recorder = getattr(store, "_" + table)
        row = StoredEvent(stream, position, topic, data)
        index = recorder._stored_events_index[str(stream)]
        if position in index:
            recorder._stored_events[index[position]] = row
        else:
            recorder.insert_events([row])
    elif store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.split("?")[0][len("sqlite:///") :]) as conn:
            conn.execute(
                f"INSERT OR REPLACE INTO {name} (originator_id, originator_version, topic, state)"
                " VALUES (?,?,?,?)",
                (stream.hex, position, topic, data),
            )
    else:
        schema = schema_of(store_url)
        with psycopg.connect(store_url.split("?")[0], autocommit=True) as conn:
            conn.execute(
                f'INSERT INTO "{schema}".{name} (originator_id, originator_version, topic, state)'
                " VALUES (%s,%s,%s,%s) ON CONFLICT (originator_id, originator_version)"
                " DO UPDATE SET topic = excluded.topic, state = excluded.state",
                (stream, position, topic, data),
            )


def raw_sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Run ``statement`` on the store's database behind its back (sqlite3 / psycopg);
    ``{s}`` is the schema prefix of table names (none on SQLite), ``?`` a parameter."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("?")[0].removeprefix("sqlite:///")) as db:
            db.execute(statement.format(s=""), params)
        return
    sql = statement.format(s=f'"{schema_of(url)}".').replace("?", "%s")
    with psycopg.connect(url.split("?")[0], autocommit=True) as db:
        db.execute(sql.encode(), params)


def schema_of(url: str) -> str:
    """The PostgreSQL schema a store URL names (``public`` when it names none)."""
    return dict(parse_qsl(urlsplit(url).query)).get("schema", "public")


def read_raw_rows(store: Store, table: str, stream: uuid.UUID) -> list[StoredEvent]:
    """The stored rows of ``stream`` in ``table`` exactly as the recorder returns them."""
    return list(getattr(store, "_" + table).select_events(stream))
