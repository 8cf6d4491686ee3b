"""The generated parts of docs/reference/ are what scripts/gen_reference.py writes from
today's code, so the CLI, failure-table, event and API references stay true."""

from __future__ import annotations

from pathlib import Path

from scripts import gen_reference

ROOT = Path(__file__).resolve().parent.parent


def test_reference_pages_are_generated_from_the_code() -> None:
    """Each page's generated regions equal a fresh rendering (run the script to fix)."""
    for page in gen_reference.pages():
        text = page.read_text()
        assert gen_reference.render(text) == text, (
            f"{page.name} is stale: run scripts/gen_reference.py"
        )


def test_every_generator_has_its_region() -> None:
    """No region was dropped from a page: each generator fills one somewhere."""
    found = [
        name for page in gen_reference.pages() for name in gen_reference.regions(page.read_text())
    ]
    assert sorted(found) == sorted(gen_reference.REGIONS)


def test_a_changed_table_makes_the_page_stale(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The check sees a difference: a failure-table row changed in the code changes the page."""
    from engine.policy import failure as policy

    page = ROOT / "docs" / "reference" / "failures.md"
    row = policy.DEFAULT_TABLE[1]
    changed = (row._replace(side_effect=policy.INDETERMINATE), *policy.DEFAULT_TABLE[2:])
    monkeypatch.setattr(policy, "DEFAULT_TABLE", (policy.DEFAULT_TABLE[0], *changed))
    assert gen_reference.render(page.read_text()) != page.read_text()
