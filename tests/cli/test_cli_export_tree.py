"""``agentlog export RUN --tree`` and its import, in process, from a SQLite file and from
PostgreSQL: the run and every descendant (not its forks) on one hash chain, parents first;
import writes the whole tree (re-linked: ``tree`` and ``runs --parent`` show it) or, for a
file that is cut, reordered or conflicts with a run already present, nothing (exit 2,
naming the line or the run)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import pytest
from test_cli_kit import Result, sqlite_url
from tree_kit import root, three_levels

from engine.store import open_store
from replay.cli.entry import run_cli
from tests.conftest import backends

TREE = ["boss", "lead", "w1", "w2", "solo"]  # parents first, children oldest first


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    code = run_cli(list(argv))
    out = capsys.readouterr()
    return Result(code, out.out, out.err)


@pytest.fixture
def exported(store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """boss's tree exported from this test's store (which also holds a fork of boss)."""
    with contextlib.closing(open_store(store_url)) as store:
        three_levels(store)
    path = tmp_path / "boss.jsonl"
    r = _cli(capsys, "export", "boss", "--tree", "-o", str(path), "--url", store_url)
    assert (r.code, r.err) == (0, "")  # no note: the children are in the file
    return path


def _runs_in(path: Path) -> list[str]:
    found: list[str] = []
    for line in path.read_text().splitlines():
        rid = json.loads(line)["run_id"]
        if rid not in found:
            found.append(rid)
    return found


@backends("sqlite", "postgres")
def test_a_tree_export_imports_whole_and_relinked(
    exported: Path, store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _runs_in(exported) == TREE  # the fork is not a descendant
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [d["index"] for d in lines] == list(range(1, len(lines) + 1))
    assert {d["total"] for d in lines} == {len(lines)} and {d["tree"] for d in lines} == {"boss"}
    dest = sqlite_url(tmp_path, "dest.db")
    first = _cli(capsys, "import", str(exported), "--json", "--url", dest)
    assert first.code == 0, first.err
    assert (first.json()["written"], first.json()["runs"]) == (TREE, TREE)
    again = _cli(capsys, "import", str(exported), "--json", "--url", dest)
    assert (again.code, again.json()["imported"], again.json()["written"]) == (0, False, [])
    tree = _cli(capsys, "tree", "boss", "--url", dest)
    assert all(rid in tree.out for rid in TREE), tree.out
    children = _cli(capsys, "runs", "--parent", "lead", "--json", "--url", dest).json()
    assert sorted(d["run_id"] for d in children) == ["w1", "w2"]
    home = _cli(capsys, "import", str(exported), "--json", "--url", store_url)
    assert (home.code, home.json()["imported"]) == (0, False)  # the very runs it came from


@backends("sqlite", "postgres")
def test_a_cut_or_conflicting_tree_is_refused_whole(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = exported.read_text().splitlines(keepends=True)
    boss_and_lead = [ln for ln in lines if json.loads(ln)["run_id"] in ("boss", "lead")]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(boss_and_lead))  # cut at a run boundary
    dest = sqlite_url(tmp_path, "dest.db")
    r = _cli(capsys, "import", str(cut), "--url", dest)
    assert r.code == 2 and "truncated" in r.err and r.out == ""

    with contextlib.closing(open_store(dest)) as store:
        root(store, "w1", "agents:other")  # a run w1 with another history
    r = _cli(capsys, "import", str(exported), "--url", dest)
    assert r.code == 2 and "run w1 already exists with a different history" in r.err
    assert _cli(capsys, "runs", "--json", "--url", dest).json()[0]["run_id"] == "w1"
    assert len(_cli(capsys, "runs", "--json", "--url", dest).json()) == 1  # nothing written


def _rechained(docs: list[dict[str, object]]) -> str:
    """Lines with ``index``, ``total`` and the hash chain made right again for ``docs``
    (as a forger who knows the format would)."""
    out, previous = [], ""
    for n, doc in enumerate(docs, 1):
        body = json.dumps({**doc, "index": n, "total": len(docs)}, separators=(",", ":"))
        previous = hashlib.sha256(previous.encode() + body.encode()).hexdigest()
        out.append(body[:-1] + f',"hash":"{previous}"}}\n')
    return "".join(out)


@backends("sqlite", "postgres")
def test_a_well_chained_tree_in_the_wrong_shape_is_refused_naming_why(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = [json.loads(line) for line in exported.read_text().splitlines()]
    for doc in docs:
        del doc["hash"]
    by_run = {rid: [d for d in docs if d["run_id"] == rid] for rid in TREE}
    dest = sqlite_url(tmp_path, "dest.db")
    shapes = {
        # a child before its parent
        "run w1 is not a child run of a run before it": (
            by_run["boss"] + by_run["w1"] + by_run["lead"]
        ),
        # a run's lines split by another run's
        "comes back after another run's lines": (
            by_run["boss"][:1] + by_run["lead"] + by_run["boss"][1:]
        ),
        # a tree holding a run of another tree
        "a tree export begins with its root run": by_run["lead"] + by_run["w1"],
    }
    for needle, forged in shapes.items():
        path = tmp_path / "forged.jsonl"
        path.write_text(_rechained(forged))
        r = _cli(capsys, "import", str(path), "--url", dest)
        assert r.code == 2 and needle in r.err, (needle, r.err)
    assert not (tmp_path / "dest.db").exists()  # refused before any store was made


@backends("sqlite", "postgres")
def test_a_tree_from_another_store_imports_into_this_one_in_one_piece(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exported from a SQLite file, imported here: all five runs, linked as they were."""
    source = sqlite_url(tmp_path, "source.db")
    with contextlib.closing(open_store(source)) as store:
        three_levels(store)
    path = tmp_path / "boss.jsonl"
    assert _cli(capsys, "export", "boss", "--tree", "-o", str(path), "--url", source).code == 0
    r = _cli(capsys, "import", str(path), "--url", store_url)
    assert r.code == 0 and "imported run boss and 4 descendant runs" in r.out, r
    listed = _cli(capsys, "runs", "--json", "--url", store_url).json()
    assert sorted(d["run_id"] for d in listed) == sorted(TREE)
    parents = {d["run_id"]: d["parent_run_id"] for d in listed}
    assert parents == {"boss": None, "lead": "boss", "solo": "boss", "w1": "lead", "w2": "lead"}


@backends("sqlite")
def test_a_signed_tree_is_one_signature_chain(
    store_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--sign is one HMAC chain over the whole tree: --require-signature takes it under
    the key it was signed with and refuses it, at line 1, under another."""
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", "k1")
    with contextlib.closing(open_store(store_url)) as store:
        three_levels(store)
    path = tmp_path / "signed.jsonl"
    argv = ["export", "boss", "--tree", "--sign", "-o", str(path), "--url", store_url]
    assert _cli(capsys, *argv).code == 0
    dest = sqlite_url(tmp_path, "dest.db")
    r = _cli(capsys, "import", str(path), "--require-signature", "--url", dest)
    assert r.code == 0 and "4 descendant runs" in r.out, r
    monkeypatch.setenv("AGENTLOG_EXPORT_KEY", "k2")
    other = sqlite_url(tmp_path, "other.db")
    r = _cli(capsys, "import", str(path), "--require-signature", "--url", other)
    assert r.code == 2 and "line 1: signature does not match" in r.err, r
