"""Shared fixtures: one store per backend; PostgreSQL isolated in a schema per test module."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from engine.store import Store, open_store

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


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A PostgreSQL URL whose schema belongs to this test alone (dropped afterwards)."""
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


def all_backends(fn: object) -> object:
    """Parametrise a test over memory, SQLite and PostgreSQL stores."""
    return pytest.mark.parametrize("store_url", BACKENDS, indirect=True)(fn)
