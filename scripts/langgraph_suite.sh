#!/usr/bin/env bash
# LangGraph's own graph tests against AgentlogSaver: downloads the source distribution of
# the installed langgraph (pip download), installs its test dependencies into the active
# environment, points its checkpointer fixtures at AgentlogSaver (on SQLite, or on
# PostgreSQL with AGENTLOG_SUITE_PG=<url>) and runs its time-travel, pregel, interruption,
# subgraph-persistence and delta-channel tests. Not part of CI (it needs LangGraph's test
# dependencies); prints pytest's pass / fail / skip counts.
#
#   bash scripts/langgraph_suite.sh [extra pytest arguments]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
version="$(python -c 'import importlib.metadata as m; print(m.version("langgraph"))')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip download -q --no-deps --no-binary :all: --no-build-isolation "langgraph==$version" -d "$work" \
  2>/dev/null || pip download -q --no-deps --no-binary :all: "langgraph==$version" -d "$work"
tar xzf "$work/langgraph-$version.tar.gz" -C "$work"
src="$work/langgraph-$version"
pip install -q pytest-mock syrupy pytest-dotenv pytest-repeat pycryptodome redis aiosqlite \
  langgraph-checkpoint-sqlite langgraph-checkpoint-postgres "psycopg[binary,pool]" anyio
# The checkpointer fixtures, redefined last in LangGraph's conftest (the last definition
# wins): AgentlogSaver, under the ids of the savers whose snapshots the tests keep.
cat >> "$src/tests/conftest.py" <<'PY'


import os as _os
import tempfile as _tempfile
import uuid as _uuid
from contextlib import contextmanager

from psycopg import Connection

from engine import Engine as _Engine
from engine.integrations.langgraph import AgentlogSaver as _AgentlogSaver


@contextmanager
def _agentlog_saver():
    pg = _os.environ.get("AGENTLOG_SUITE_PG")
    schema = f"lgsuite_{_uuid.uuid4().hex[:10]}"
    if pg:
        sep = "&" if "?" in pg else "?"
        engine = _Engine.open(f"{pg}{sep}schema={schema}")
    else:
        engine = _Engine.open(f"sqlite:///{_tempfile.mkdtemp()}/agentlog.db")
    engine.store.runs()  # open the store (and make its schema) before a test times anything
    try:
        yield _AgentlogSaver(engine)
    finally:
        engine.close()
        if pg:
            with Connection.connect(pg.split("?")[0], autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="function", params=[pytest.param("agentlog", id="sqlite")])
def sync_checkpointer(request: pytest.FixtureRequest):
    with _agentlog_saver() as saver:
        yield saver


@pytest.fixture(scope="function", params=[pytest.param("agentlog", id="sqlite_aio")])
async def async_checkpointer(request: pytest.FixtureRequest):
    with _agentlog_saver() as saver:
        yield saver
PY
cd "$src"
tests=(tests/test_time_travel.py tests/test_time_travel_async.py tests/test_pregel.py
  tests/test_pregel_async.py tests/test_interruption.py tests/test_subgraph_persistence.py
  tests/test_subgraph_persistence_async.py tests/test_delta_channel_*.py)
NO_DOCKER=true PYTHONPATH="$src:$here" python -m pytest "${tests[@]}" -p no:randomly \
  -p no:cacheprovider -q -o addopts="" -k "sqlite" "$@" | tail -40
