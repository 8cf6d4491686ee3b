"""Store URLs are strict: a parameter a store does not know is refused with the list of
those it accepts; PostgreSQL passes libpq's connection parameters through (``sslmode``
behaves as it does for ``psql``); ``?schema=`` takes identifiers only; and no message,
however malformed the URL, shows its password."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import PG_URL, drop_schema

from engine.errors import StoreUnavailable
from engine.store import mask, open_store
from engine.store.url import ACCEPTED, LIBPQ, scrub
from replay.cli.entry import run_cli

NOWHERE = "postgresql://u@127.0.0.1:1/db"  # nothing listens: any URL that passes is refused
PG_BASE = PG_URL.split("?")[0]


def _refused(url: str, *needles: str) -> str:
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    message = str(info.value)
    for needle in needles:
        assert needle in message, (needle, message)
    return message


# --- unknown, repeated and malformed parameters -------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "url"),
    [
        ("memory", "memory://?synchronous=OFF"),
        ("sqlite", "sqlite:///{tmp}/a.db?synchronus=OFF"),
        ("sqlite", "sqlite:///{tmp}/a.db?schema=x"),
        ("postgresql", NOWHERE + "?sslmod=require"),
        ("postgresql", NOWHERE + "?Schema=x"),
        ("postgresql", NOWHERE + "?synchronous=OFF"),
    ],
)
def test_an_unknown_parameter_is_refused_listing_the_accepted_ones(
    scheme: str, url: str, tmp_path: Path
) -> None:
    """A typo is not ignored: the error names it and every parameter the store accepts,
    and nothing is created (the server, which nothing answers at, is never reached)."""
    message = _refused(url.format(tmp=tmp_path), "unknown parameter", "accepted: ")
    assert ", ".join(ACCEPTED[scheme]) in message
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("synchronous=FULL&synchronous=OFF", "given twice"),
        ("synchronous", "malformed query"),
        ("synchronous=FULL&&cipher=none", "malformed query"),
        ("blob_threshold=0", "blob_threshold must be an integer of at least 1"),
        ("max_payload=lots", "max_payload must be an integer"),
        ("blob_threshold=" + "9" * 5000, "blob_threshold must be an integer"),
    ],
)
def test_repeated_malformed_or_bad_integer_parameters_are_refused(
    query: str, needle: str, tmp_path: Path
) -> None:
    _refused(f"sqlite:///{tmp_path}/a.db?{query}", needle)
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("pool_size=0", "pool_size must be an integer of at least 1"),
        ("max_overflow=-1", "max_overflow must be an integer of at least 0"),
        ("connect_timeout=soon", "connect_timeout must be an integer"),
    ],
)
def test_postgres_integer_parameters_are_checked_before_connecting(query: str, needle: str) -> None:
    _refused(f"{NOWHERE}?{query}", needle)


def test_every_accepted_sqlite_parameter_opens(tmp_path: Path) -> None:
    """The accepted list is what is accepted: all of them together open a store."""
    url = f"sqlite:///{tmp_path}/a.db?synchronous=NORMAL&blob_threshold=1000&max_payload=99999"
    store = open_store(url + "&cipher=none")
    try:
        assert (store.blob_threshold, store.max_payload) == (1000, 99999)
    finally:
        store.close()


@pytest.mark.parametrize(("mode", "level"), [("FULL", 2), ("NORMAL", 1), ("OFF", 0)])
def test_every_sqlite_connection_has_the_urls_sync_mode_and_busy_timeout(
    tmp_path: Path, mode: str, level: int
) -> None:
    """Each pooled SQLite connection runs with ?synchronous= (FULL by default) and waits
    30 s for the write lock, including connections opened while others are in use."""
    query = "" if mode == "FULL" else f"?synchronous={mode}"
    store = open_store(f"sqlite:///{tmp_path}/a.db{query}")
    pool = store._events.datastore.pool  # type: ignore[attr-defined]
    try:
        held = [pool.get_connection(), pool.get_connection()]
        for conn in held:
            cursor = conn.cursor()
            cursor.execute("PRAGMA synchronous")
            assert cursor.fetchone()[0] == level
            cursor.execute("PRAGMA busy_timeout")
            assert cursor.fetchone()[0] == 30_000
        for conn in held:
            pool.put_connection(conn)
    finally:
        store.close()


# --- PostgreSQL: libpq parameters and schemas ---------------------------------------------


@pytest.mark.postgres
def test_libpq_parameters_reach_every_connection(pg_url: str) -> None:
    """All seven libpq parameters are accepted; application_name shows on the pool's own
    connections, not only on the probe, so the others reach them the same way."""
    name = f"agentlog_t_{uuid.uuid4().hex[:8]}"
    query = (
        f"&sslmode=prefer&sslrootcert=/nonexistent/root.crt&sslcert=/nonexistent/c.crt"
        f"&sslkey=/nonexistent/c.key&connect_timeout=7&application_name={name}"
        "&target_session_attrs=read-write"
    )
    assert {p.split("=")[0] for p in query.strip("&").split("&")} == set(LIBPQ)
    store = open_store(pg_url + query)
    try:
        with store._events.datastore.get_connection() as conn:  # type: ignore[attr-defined]
            row = conn.execute("SELECT current_setting('application_name') AS a").fetchone()
        assert row["a"] == name
    finally:
        store.close()


@pytest.mark.postgres
def test_a_postgres_url_with_sslmode_disable_opens(pg_url: str) -> None:
    store = open_store(pg_url + "&sslmode=disable")
    store.close()


@pytest.mark.postgres
def test_sslmode_require_fails_as_psql_does_with_the_password_masked() -> None:
    """This server has no SSL: ``sslmode=require`` is refused with libpq's own line (the
    one psql prints), not silently sent in plain text; the password is masked."""
    url = PG_BASE.replace("postgresql://postgres@", "postgresql://postgres:s3cr3t-pw@")
    message = _refused(url + "?sslmode=require", "SSL was required", "postgres:***@")
    assert "s3cr3t-pw" not in message
    psql = shutil.which("psql")
    if psql is not None:  # the same words psql uses
        p = subprocess.run(
            [psql, PG_BASE + "?sslmode=require", "-c", "SELECT 1"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode != 0
        assert p.stderr.strip().removeprefix("psql: error: ") in message


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("sslmode=bogus", 'invalid sslmode value: "bogus"'),
        ("target_session_attrs=read-only", "session is not read-only"),
    ],
)
def test_libpq_refusals_are_store_unavailable(query: str, needle: str) -> None:
    _refused(f"{PG_BASE}?{query}", needle)


@pytest.mark.parametrize(
    "schema",
    [
        "",
        "a;drop table x",
        'a"b',
        "a b",
        "1abc",
        "a-b",
        "x" * 64,
        "pg_catalog",
        "PG_x",
        "information_schema",
        "sch\u00e9ma",
    ],
)
def test_schema_must_be_a_plain_identifier(schema: str) -> None:
    """Refused before any connection is tried (the host answers nothing)."""
    from urllib.parse import quote

    _refused(f"{NOWHERE}?schema={quote(schema)}", "schema must be an SQL identifier")


@pytest.mark.postgres
def test_a_mixed_case_identifier_schema_is_used_as_written() -> None:
    schema = f"T_{uuid.uuid4().hex[:8]}"
    try:
        open_store(f"{PG_BASE}?schema={schema}").close()
        store = open_store(f"{PG_BASE}?schema={schema}", create=False)
        assert store.runs() == []
        store.close()
    finally:
        drop_schema(schema)


# --- passwords are never shown ------------------------------------------------------------

HOST = "127.0.0.1:1"
LEAKY = [
    f"postgresql://u:pw1#pw2@{HOST}/db",
    f"postgresql://u:pw1/pw2@{HOST}/db",
    f"postgresql://u:pw1?pw2@{HOST}/db",
    f"postgresql://u:pw1@pw2@{HOST}/db",
    f"postgresql://u:pw1:pw2@{HOST}/db",
    f"postgresql://u:pw1%23pw2@{HOST}/db",
    f"postgresql://u:pw1 pw2@{HOST}/db",
    f"postgresql://u:pw1/pw2?pw3@{HOST}/db?sslmode=require",
    f"postgresql://u:pw1?schema=pw2@{HOST}/db",
    "postgresql://u:pw1#pw2@[::1/db",
    f"postgresql://u:pw1pw2@{HOST}/db?bogus=1",
    f"postgresql://u:pw1pw2@{HOST}/db?schema=a;b",
    f"postgresql://u:pw1pw2@{HOST}:99999/db",
    "postgresql://u:pw1#pw2@/db",
    "postgres://u:pw1/pw2@host",
    "mysql://u:pw1#pw2@h/db",
    "sqlite://u:pw1#pw2@/x.db",
    "memory://u:pw1?pw2@x",
]


@pytest.mark.parametrize("url", LEAKY)
@pytest.mark.parametrize("where", ["--url", "AGENTLOG_URL"])
def test_no_url_shows_its_password_through_the_cli(
    url: str, where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentlog runs`` on URLs whose password holds unencoded ``#``, ``/``, ``?``, ``@``,
    ``:``, a space, or that are malformed in other ways: exit 2, one line, the user and
    ``***`` shown, no piece of the password."""
    if where == "--url":
        code = run_cli(["runs", "--url", url])
    else:
        monkeypatch.setenv("AGENTLOG_URL", url)
        code = run_cli(["runs"])
    out = capsys.readouterr()
    assert code == 2, out
    assert out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    assert "u:***@" in out.err, out.err
    for piece in ("pw1", "pw2", "pw3"):
        assert piece not in out.err + out.out, out.err


def test_mask_takes_the_password_up_to_the_last_at() -> None:
    """Everything between the user and the last ``@`` is the password; the host, database
    and query after it stay readable."""
    assert mask("postgresql://u:a#b/c?d@e@host:5/db?schema=s") == (
        "postgresql://u:***@host:5/db?schema=s"
    )
    assert mask("postgresql://u@host/db?application_name=a:b") == (
        "postgresql://u@host/db?application_name=a:b"
    )
    assert mask("sqlite:///dir/with:colon@x.db") == "sqlite:///dir/with:colon@x.db"


def test_scrub_removes_the_password_as_written_and_decoded() -> None:
    url = "postgresql://u:pw1%23pw2@h/db"
    text = scrub(f"failed for {url}: password pw1#pw2 or pw1%23pw2 rejected", url)
    assert "pw1" not in text and "u:***@h/db" in text


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u@{HOST}/db?password=pw1pw2",
        f"postgresql://u@{HOST}/db?sslmode=disable&PASSWORD=pw1%23pw2",
        "sqlite:///./x.db?password=pw1pw2",
        "sqlite:///./x.db?api_token=pw1pw2&synchronous=FULL",
    ],
)
def test_a_secret_query_parameter_is_never_shown(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A password (or any secret-named value) passed as a query parameter is refused like
    any unknown parameter, and shown masked, as written and decoded."""
    assert run_cli(["runs", "--url", url]) == 2
    err = capsys.readouterr().err
    assert "=***" in err and "pw1" not in err and "pw2" not in err, err
