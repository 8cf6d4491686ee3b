"""``agentlog drill``: the crash campaign as a command, on the user's own agent."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer

from engine.errors import UsageError

from ..output import Out
from .app import app, session
from .commands import _json_object

if TYPE_CHECKING:
    from ..drill import Report


Kills = Annotated[int, typer.Option("--kills", min=0, max=100_000, help="Kills to make.")]
Latency = Annotated[
    list[str] | None,
    typer.Option("--latency", metavar="TOOL=S", help="Wait S seconds before each attempt."),
]
Fail = Annotated[
    list[str] | None,
    typer.Option(
        "--fail",
        metavar="TOOL=KIND",
        help="Fail each call's first attempt: transient, permanent, indeterminate "
        "(after sending) or logical.",
    ),
]
Malformed = Annotated[
    list[str] | None,
    typer.Option("--malformed", metavar="TOOL", help="The tool returns malformed data."),
]
Stub = Annotated[
    list[str] | None,
    typer.Option("--stub", metavar="TOOL", help="Stub a side-effecting tool (not sent)."),
]
Store = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="Drill in this store (a sqlite:/// file or a postgresql:// URL; one file "
        "or schema per run); default: temporary SQLite files. --url is never used.",
    ),
]
Seed = Annotated[
    int | None, typer.Option("--seed", min=0, max=2**62, help="Repeat a drill's choices.")
]
Failpoints = Annotated[
    str | None,
    typer.Option("--failpoints", metavar="A,B", help="Kill only at these failpoints."),
]
TimerShare = Annotated[
    float,
    typer.Option("--timer-share", min=0.0, max=1.0, help="Share of kills made by a timer."),
]


@app.command()
def drill(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="MODULE:AGENT", show_default=False)],
    input: Annotated[
        str, typer.Option("--input", "-i", help="The agent's keyword arguments as a JSON object.")
    ] = "{}",
    kills: Kills = 10,
    latency: Latency = None,
    fail: Fail = None,
    malformed: Malformed = None,
    stub: Stub = None,
    store: Store = None,
    seed: Seed = None,
    failpoints: Failpoints = None,
    timer_share: TimerShare = 0.25,
) -> int:
    """Run MODULE:AGENT again and again in a scratch store, kill it at failpoints and at
    random, recover each run, and count duplicated and lost effects (exit 1 if any)."""
    from ..drill import Options, drill, failpoint_names, failures, latencies

    s = session(ctx)
    options = Options(
        target=target,
        input=_json_object(input, "--input"),
        kills=kills,
        latency=latencies(latency or []),
        fail=failures(fail or []),
        malformed=tuple(malformed or ()),
        stub=tuple(stub or ()),
        store=store,
        seed=random.SystemRandom().randrange(2**31) if seed is None else seed,
        timer_share=timer_share,
        failpoints=failpoint_names(failpoints),
    )
    if store is not None and store.startswith("memory:"):
        raise UsageError("drill: --store must be a store other processes can open, not memory://")
    report = drill(options)
    if s.as_json:
        s.out.json(report)
    else:
        _print(s.out, report)
    return 0 if report.clean else 1


def _print(out: Out, report: Report) -> None:
    doc = msgspec.to_builtins(report)
    for name in ("runs", "kills", "recoveries", "duplicated_effects", "lost_effects",
                 "final_state_mismatches"):  # fmt: skip
        out.line(f"{name.replace('_', ' ')}: {doc[name]}")
    rto = doc["rto_s"]
    out.line(f"rto: median {rto['median']} s, p95 {rto['p95']} s")
    missing = ", ".join(doc["tools_without_verifier"]) or "none"
    out.line(f"side-effecting tools without a verifier: {missing}")
    kills_at = ", ".join(f"{k} {n}" for k, n in doc["kills_at"].items()) or "none"
    out.line(f"kills at: {kills_at}; final statuses: {doc['statuses']}; seed {doc['seed']}")
