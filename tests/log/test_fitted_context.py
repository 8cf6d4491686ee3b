"""``engine.context(run_id, max_tokens=N)`` (engine.log.fitted) and ``agentlog context
--max-tokens`` / ``agentlog blob``: the recovery context fitted to a token budget."""

from __future__ import annotations

import importlib.util
import io
import re
from contextlib import redirect_stdout
from typing import Any

from conftest import backends

from engine import Engine
from engine.tokens import count_tokens, estimate
from replay.cli.entry import run_cli
from replay.cli.quick import plan


def _rows(n: int) -> dict[str, Any]:
    return {"rows": [{"i": i, "text": "x" * 30} for i in range(n)], "n": n}


def _run(eng: Engine) -> str:
    @eng.tool
    def fetch(n: int, page: str = "p" * 60) -> dict[str, Any]:
        return _rows(n)

    @eng.tool(side_effect=True, key=lambda order: f"pay:{order}")
    def pay(order: str, *, idempotency_key: str) -> dict[str, str]:
        return {"receipt": idempotency_key}

    @eng.agent
    def agent(run: Any, order: str) -> str:
        run.plan(["fetch", "pay", "reply"])
        with run.step("fetch"):
            for k in range(14):
                fetch(40 + k)
        with run.step("pay"):
            pay(order)
        return "ok"

    return eng.run(agent, order="o7").run_id


@backends("sqlite", "postgres")
def test_the_context_fits_its_budget_and_keeps_the_whole_of_what_matters(eng: Engine) -> None:
    """Under each budget: within it, the same text twice, and goal, plan, progress, next
    step and last observation whole."""
    rid = _run(eng)
    full = eng.context(rid)
    for budget in (2000, 500, 250, 120):
        text = eng.context(rid, max_tokens=budget)
        assert count_tokens(text) <= budget or budget < count_tokens(_header(text))
        assert text == eng.context(rid, max_tokens=budget)
        for line in ('input {"order":"o7"}', "Plan: fetch, pay, reply", "Done: fetch, pay",
                     "Next: reply", 'Last observation: {"receipt":"pay:o7"}'):  # fmt: skip
            assert line in text
    assert count_tokens(full) > 500  # the budgets above did cut something


@backends("sqlite", "postgres")
def test_large_results_become_summaries_whose_blob_holds_the_whole_value(eng: Engine) -> None:
    rid = _run(eng)
    text = eng.context(rid, max_tokens=600)
    ids = re.findall(r"object of 2 keys: rows, n; whole value: blob ([0-9a-f]+\.\d+)>", text)
    assert ids, text
    assert eng.blob(ids[-1]) == _rows(53)  # the newest fetch is listed in detail


def test_older_events_keep_only_type_tool_and_key_arguments(eng: Engine) -> None:
    """An old call loses its result and its long arguments; the newest keep theirs."""
    rid = _run(eng)
    lines = eng.context(rid, max_tokens=500).splitlines()
    old = next(line for line in lines if "fetch(" in line)
    assert old.endswith("fetch(n=40)"), old  # the 60-char page argument and result gone
    assert lines[-2].startswith("#") and "pay(" in lines[-2] and "key pay:o7 ->" in lines[-2]
    assert "older events left out" in eng.context(rid, max_tokens=150)


def test_without_tiktoken_tokens_are_utf8_bytes_over_four() -> None:
    assert estimate("") == 0 and estimate("abcd") == 1 and estimate("abcde") == 2
    assert estimate("é") == 1  # two bytes
    text = "a recovery context, counted"
    if importlib.util.find_spec("tiktoken") is None:
        assert count_tokens(text) == estimate(text) == 7


def test_the_commands_take_max_tokens_and_print_blobs(store_url: str) -> None:
    """``context --max-tokens`` on the quick path and through Typer, ``blob ID``, and
    a bad budget or id as exit 2."""
    eng = Engine.open(store_url)
    rid = _run(eng)
    eng.close()
    assert plan(["--url", store_url, "context", rid, "--max-tokens", "600"]) is not None
    quick, code = _cli(["context", rid, "--max-tokens", "600", "--url", store_url])
    typed, code2 = _cli(["context", rid, "--max-tokens", "600", "--url", store_url, "--help"])
    assert code == 0 and count_tokens(quick) <= 601 and "Next: reply" in quick
    assert code2 == 0 and "--max-tokens" in typed
    blob_id = re.findall(r"blob ([0-9a-f]+\.\d+)>", quick)[-1]
    shown, code = _cli(["blob", blob_id, "--url", store_url])
    assert code == 0 and '"n": 53' in shown
    assert _cli(["context", rid, "--max-tokens", "0", "--url", store_url])[1] == 2
    assert _cli(["blob", "zz", "--url", store_url])[1] == 2


def _cli(argv: list[str]) -> tuple[str, int]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = run_cli(argv)
    return out.getvalue(), code


def _header(text: str) -> str:
    return text.partition("History (oldest first):")[0]
