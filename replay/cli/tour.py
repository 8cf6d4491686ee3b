"""``agentlog demo``: a sixty-second tour of crash, resume, rewind and timeline.

The demo agent (``replay.demo``) runs in a child process armed with a failpoint that
SIGKILLs it after the card was charged but before the log recorded the outcome. The
tour then resumes the run from its log (the payment service is asked, not charged
again), rewinds it to a checkpoint on a new branch, and prints the timeline.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.panel import Panel

from engine import Engine, RunResult
from engine.kinds import RunStatus
from engine.store import default_url

from .. import demo
from ..output import Out, brief
from ..timeline import header, story, views

# The child dies the 2nd time a tool returns: the CRM lookup is the 1st, the charge the 2nd.
FAILPOINT = "after_tool:2"


def _world_beside(url: str) -> str:
    """The fake payment service's file, kept beside the SQLite database."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :].split("?", 1)[0]
        return os.path.join(os.path.dirname(os.path.abspath(path)), demo.WORLD_FILE)
    return os.path.join(os.getcwd(), demo.WORLD_FILE)


def tour(url: str | None = None) -> int:
    """Run the tour on ``url`` (default: the embedded store in the current directory)."""
    url = url or default_url()
    con = Console(highlight=False, soft_wrap=True)
    with _world_env(_world_beside(url)):
        engine = Engine.open(url)
        try:
            return _tour(con, Out(), engine, url)
        finally:
            engine.close()


@contextlib.contextmanager
def _world_env(path: str) -> Iterator[None]:
    """The payment service's file named in this process's environment (the demo child
    inherits it) for the tour's length only: a tour called in-process (a test, a
    notebook) leaves no ``$AGENTLOG_DEMO_WORLD`` behind for later runs to charge into."""
    before = os.environ.get(demo.WORLD_ENV)
    os.environ[demo.WORLD_ENV] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(demo.WORLD_ENV, None)
        else:
            os.environ[demo.WORLD_ENV] = before


def _step(con: Console, n: int, title: str) -> None:
    con.print()
    con.print(f"[bold cyan]{n}.[/] [bold]{title}[/]")


def _charges(order: str) -> str:
    n = len(demo.charges_for(order))
    style = "green" if n == 1 else "bold red"
    return f"payment service: [{style}]{n} charge{'s' * (n != 1)}[/] for order {order}"


def _tour(con: Console, out: Out, engine: Engine, url: str) -> int:
    ticket = demo.new_ticket()
    order = ticket["order"]
    run_id = uuid.uuid4().hex
    _intro(con, engine, ticket)
    if not _crash(con, engine, url, run_id, ticket):
        return 1
    result = _resume(con, engine, run_id, order)
    fork = _rewind(con, engine, run_id, order)
    _step(con, 4, f"The timeline of run {run_id}")
    con.file.flush()
    branch = [(fork.run_id, engine.state(fork.run_id).fork_position)]
    out.lines(header(engine.state(run_id), branch))
    out.lines(story(views(engine, run_id)))
    out.stream.flush()
    once = len(demo.charges_for(order)) == 1 and result.status == fork.status == RunStatus.COMPLETED
    _next(con, run_id, fork.run_id)
    if not once:
        con.print("[bold red]the demo did not go as expected: see the timeline above[/]")
        return 1
    return 0


def _intro(con: Console, engine: Engine, ticket: dict[str, Any]) -> None:
    con.print(
        Panel.fit(
            "A support-ticket agent upgrades a customer and [bold]charges a card[/].\n"
            "We kill it with SIGKILL in the middle of the payment, resume it from its log\n"
            "without charging twice, rewind it to a checkpoint on a new branch, and read\n"
            "the story of what happened.",
            title="[bold]agentlog demo[/]",
        )
    )
    con.print(f"store:    {engine.store.name}")
    world = os.path.relpath(os.environ[demo.WORLD_ENV])
    con.print(f"payments: {world} (a fake payment service)")
    con.print(f"ticket:   {brief(ticket, 100)}")


def _crash(con: Console, engine: Engine, url: str, run_id: str, ticket: dict[str, Any]) -> bool:
    """Step 1: the child dies mid-payment; whether it died as planned."""
    _step(con, 1, "Run the agent in a child process, armed to die mid-payment")
    con.print(f"   AGENTLOG_FAILPOINTS={FAILPOINT}: SIGKILL once the charge returns, before")
    con.print("   its outcome reaches the log")
    code = _run_child(url, run_id, ticket)
    if code != -signal.SIGKILL:
        con.print(f"[bold red]   the child was expected to be killed, but it exited with {code}[/]")
        return False
    con.print("   the CRM timed out once and was retried (backoff with jitter), the model")
    con.print("   triaged the ticket, the card was charged... and then:")
    con.print("   [red]✗ child killed by SIGKILL[/] (exit -9): the agent's process is gone")
    con.print(f"   {_charges(ticket['order'])}: the charge landed, but the log never heard back")
    state = engine.state(run_id)
    pending = ", ".join(f"call {p.call} {p.tool} (key {p.key})" for p in state.pending)
    con.print(f"   run {run_id}: status [blue]{state.status}[/], {state.position} events")
    con.print(f"   the log ends with an intent and no outcome: [yellow]{pending or 'none'}[/]")
    return True


def _resume(con: Console, engine: Engine, run_id: str, order: str) -> RunResult:
    _step(con, 2, "Resume the run from its log")
    result = engine.resume(run_id)
    con.print(f"   [green]✓ {result.status}[/]: the CRM lookup and the triage decision were")
    con.print("   replayed from the log, not redone; the uncertain charge was checked with the")
    con.print("   payment service's verifier, which found it, so it was not sent again")
    con.print(f"   {_charges(order)}: charged exactly once")
    con.print(f"   reply: {brief(result.output.get('reply') if result.output else None, 100)}")
    return result


def _rewind(con: Console, engine: Engine, run_id: str, order: str) -> RunResult:
    _step(con, 3, "Rewind to checkpoint 'paid' on a new branch")
    fork = engine.rewind(run_id, "paid")
    con.print(f"   fork {fork.run_id}: [green]{fork.status}[/]; it inherited the parent's")
    con.print("   calls up to 'paid' (the charge included) and drafted the reply again:")
    con.print(f"   reply: {brief(fork.output.get('reply') if fork.output else None, 100)}")
    con.print(f"   {_charges(order)}: the branch did not pay again")
    return fork


def _next(con: Console, run_id: str, fork_id: str) -> None:
    """What to try next, and how to start a run of one's own."""
    short, fshort = run_id[:8], fork_id[:8]
    tries = [
        ("agentlog runs", "every run, newest first"),
        (f"agentlog timeline {fshort}", "the branch and its lineage"),
        (f"agentlog diff {short} {fshort}", "what the branch changed"),
        (f"agentlog state {short} --at customer-loaded", "state at a checkpoint"),
        (f"agentlog rewind {short} --to customer-loaded", "re-decide; charge reused"),
        (f"agentlog context {short}", "recovery context for an LLM"),
        (f"agentlog verify {short}", "replay the log vs the code"),
        (f"agentlog export {short} > run.jsonl", "move it to another store"),
        (f"agentlog abandon {short}", "refused (exit 2): completed"),
        ("agentlog stats", "tools, crashes, recovery time, across runs"),
    ]
    width = max(len(cmd) for cmd, _ in tries) + 2
    con.print()
    con.print(
        Panel.fit(
            "\n".join(f"{cmd:<{width}}[dim]# {why}[/]" for cmd, why in tries),
            title="[bold]try next[/] (a run id may be shortened to any unique prefix)",
        )
    )
    con.print("and start a run of your own:")
    con.print(
        "  agentlog run replay.demo:support_ticket --input "
        f"'{json.dumps({'ticket': demo.new_ticket()})}'"
    )


def _run_child(url: str, run_id: str, ticket: dict[str, Any]) -> int:
    # The URL (it may hold a password) goes by environment: a command line is public in ps.
    env = {**os.environ, "AGENTLOG_FAILPOINTS": FAILPOINT, "AGENTLOG_URL": url}
    code = (
        "import os, sys; from replay.demo import child; "
        "child(os.environ['AGENTLOG_URL'], *sys.argv[1:])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, run_id, json.dumps(ticket)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if proc.returncode != -signal.SIGKILL and proc.stderr:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
    return proc.returncode
