"""``agentlog prune`` and ``agentlog storage`` in a real process: the engine's reports as
JSON, a dry run that writes nothing, an archive that imports back, one clear line and
exit 2 for a bad span or status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import backends
from test_cli_kit import make_workdir, one_line_error

from engine import Engine


@backends("sqlite", "postgres")
def test_prune_and_storage_from_the_command_line(store_url: str, tmp_path: Path) -> None:
    eng = Engine(store_url)
    try:

        @eng.agent(name="tests:cli_prune")
        def hello(run: Any, name: str) -> str:
            run.checkpoint("start")
            return f"hello {name}"

        @eng.agent(name="tests:cli_prune_ask")
        def ask(run: Any) -> str:
            return str(run.ask("ok?"))

        done = sorted(eng.run(hello, name=f"n{i}").run_id for i in range(3))
        paused = eng.run(ask).run_id
    finally:
        eng.close()
    work = make_workdir(tmp_path, store_url)
    archive = tmp_path / "archive"
    first, dry, typer_form, bad_span, bad_status = work.many(
        [
            ["storage", "--json"],
            ["prune", "--older-than", "0s", "--dry-run", "--json"],
            ["--json", "storage", "--human"],  # not the quick path's: Typer answers
            ["prune", "--older-than", "soon"],
            ["prune", "--older-than", "1d", "--status", "paused"],
        ]
    )
    doc = first.json()
    assert sorted(r["run_id"] for r in doc["runs"]) == sorted([*done, paused])
    assert doc["agents"][0]["runs"] in (1, 3) and doc["total_bytes"] > 0
    assert doc["prune"]["runs"] == 0  # nothing is 30 days old
    assert sorted(dry.json()["run_ids"]) == done and dry.json()["dry_run"] is True
    assert typer_form.code == 2 and "--human" in typer_form.err
    one_line_error(bad_span, "--older-than", "soon")
    one_line_error(bad_status, "paused")
    real, after, text = work.many(
        [
            ["prune", "--older-than", "0s", "--archive", str(archive), "--json"],
            ["storage", "--json"],
            ["prune", "--older-than", "0s"],
        ]
    )
    assert sorted(real.json()["run_ids"]) == done and real.json()["bytes_freed"] > 0
    assert sorted(p.stem for p in archive.glob("*.jsonl")) == done
    assert [r["run_id"] for r in after.json()["runs"]] == [paused]
    assert after.json()["total_bytes"] < doc["total_bytes"]
    assert text.code == 0 and text.out.startswith("pruned 0 runs")
    assert work.ok("import", str(archive / f"{done[0]}.jsonl")).code == 0
