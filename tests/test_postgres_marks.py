"""``-m "not postgres"`` runs no PostgreSQL test: the PostgreSQL cases of ``all_backends``
and ``backends`` carry the mark, and a test that reaches the ``pg_url`` fixture (or takes
a ``postgres`` parameter) without it fails the collection, or the test itself."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()


def _suite(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\naddopts = --strict-markers\nmarkers =\n    postgres: pg\n")
    pytester.makepyfile(
        test_suite="import pytest\nfrom conftest import all_backends, backends\n" + body
    )
    return pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:xdist", *args)


def test_all_backends_marks_its_postgres_case(pytester: pytest.Pytester) -> None:
    """Deselecting ``postgres`` keeps memory and SQLite and drops only the PostgreSQL case."""
    body = (
        "@all_backends\ndef test_a(store_url): pass\n"
        "@backends('sqlite', 'postgres')\ndef test_b(store_url): pass\n"
    )
    r = _suite(pytester, body, "--collect-only", "-q", "-m", "not postgres")
    assert r.ret == 0, r.stdout.str()
    ids = [line for line in r.outlines if "::" in line]
    assert ids == [
        "test_suite.py::test_a[memory]",
        "test_suite.py::test_a[sqlite]",
        "test_suite.py::test_b[sqlite]",
    ]


@pytest.mark.parametrize(
    "body",
    [
        "def test_unmarked(pg_url): pass\n",
        "@pytest.mark.parametrize('store_url', ['postgres'], indirect=True)\n"
        "def test_unmarked(store_url): pass\n",
    ],
)
def test_an_unmarked_postgres_test_fails_the_collection(
    pytester: pytest.Pytester, body: str
) -> None:
    """A test using the pg_url fixture, or a bare ``postgres`` store parameter, without the
    mark stops the run at collection, naming the test (also under ``-m "not postgres"``)."""
    r = _suite(pytester, body, "--collect-only", "-q", "-m", "not postgres")
    assert r.ret != 0
    assert "without the postgres mark" in r.stderr.str() + r.stdout.str()
    assert "test_unmarked" in r.stderr.str() + r.stdout.str()


def test_a_test_reaching_pg_url_at_run_time_without_the_mark_fails(
    pytester: pytest.Pytester,
) -> None:
    """``request.getfixturevalue('pg_url')`` from an unmarked test (invisible to the
    collection check) fails the test before it touches the server."""
    body = "def test_dynamic(request):\n    request.getfixturevalue('pg_url')\n"
    r = _suite(pytester, body, "-q")
    r.assert_outcomes(failed=1)
    assert "test_dynamic uses PostgreSQL but is not marked postgres" in r.stdout.str()
