#!/usr/bin/env python
"""Crash campaign: kill agent processes with SIGKILL, resume them, count the damage.

Runs tests/agents/campaign_agent.py (side effects of every kind: business and default
keys, with and without verifiers, with and without idempotency keys) and, with
``--agent async`` or ``mix`` (the default), tests/agents/async_campaign_agent.py (async
tools issued concurrently with ``asyncio.gather``, finishing in reverse order, and an
async decision) against a fake outside service that counts every execution per
operation in its own SQLite file. Each step of a run (start, resume, recover, answer,
abandon) is a fresh child process; the parent kills children with SIGKILL at random
moments (a timer) and at every failpoint (``AGENTLOG_FAILPOINTS``: after_intent,
after_tool, after_outcome, in_snapshot, in_compensation), and continues the run (killing
some of those steps too) until it completes or, for one round in three, is abandoned
(compensations run). A run whose owner was killed is continued by ``resume`` or, for a
share of steps (``--recover-share``), by ``engine.recover()`` in another process, which
must find the dead owner by its lease and take the run over. A run paused because nobody
can tell whether an effect happened is answered truthfully: the parent asks the fake
service whether the effect is there.

The same rounds run once more, uncrashed, in the parent (memory store, its own service
file). The report compares the two: duplicated effects, lost effects and final-state
mismatches (status, output, the service's books) must all be 0.

    python scripts/crash_campaign.py --kills 1000 --store sqlite
    python scripts/crash_campaign.py --kills 300 --agent async --recover-share 0.5
    python scripts/crash_campaign.py --kills 200 --store postgres --url postgresql://...

The seed is printed at start (stderr) and in the report; ``--seed N`` or
``AGENTLOG_CAMPAIGN_SEED=N`` repeats a campaign's choices.

Exit status: 0 all clear, 1 damage found (or too few kills), 2 bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUN_FAILPOINTS = ("after_intent", "after_tool", "after_outcome", "in_snapshot")
AGENTS = ("sync", "async")
SEED_ENV = "AGENTLOG_CAMPAIGN_SEED"  # fixes the seed when --seed is not given
NOT_RECOVERED = 5  # a recover child's exit code when it did not take the run over
ABANDON_FAILPOINTS = ("in_compensation", "in_compensation", "in_snapshot")
DEFAULT_PG = os.environ.get(
    "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
)


# --- the child: one step of a run, in a process of its own ---------------------------


def agent_module(kind: str) -> Any:
    """The campaign agent's module: ``sync`` or ``async``."""
    if kind == "async":
        from tests.agents import async_campaign_agent

        return async_campaign_agent
    from tests.agents import campaign_agent

    return campaign_agent


def agent_of(kind: str) -> Any:
    module = agent_module(kind)
    return module.async_campaign if kind == "async" else module.campaign


def child(argv: list[str]) -> int:
    """``run URL RID JSON AGENT`` | ``resume URL RID`` | ``recover URL RID`` |
    ``answer URL RID VALUE`` | ``abandon URL RID``. Only ``run`` imports the agent; the
    others find it through the import path the run recorded. ``recover`` exits
    NOT_RECOVERED if ``engine.recover()`` did not take the run over."""
    from engine import Engine

    cmd, url, rid = argv[:3]
    engine = Engine.open(url)
    if cmd == "run":
        agent = agent_of(argv[4] if len(argv) > 4 else "sync")
        r = engine.run(agent, run_id=rid, **json.loads(argv[3]))
    elif cmd == "recover":
        found = [x for x in engine.recover() if x.run_id == rid]
        if not found:
            return NOT_RECOVERED
        r = found[0]
    elif cmd == "resume":
        r = engine.resume(rid)
    elif cmd == "answer":
        r = engine.answer(rid, argv[3])
    elif cmd == "abandon":
        r = engine.abandon(rid)
    else:
        raise SystemExit(f"unknown child command {cmd}")
    print(json.dumps({"status": r.status, "output": r.output, "error": r.error}))
    return 0


# --- launching children: a fresh interpreter each, or forks of a preloaded zygote ------


class Launcher:
    """Starts child steps and reports how they ended (``-9``: killed by SIGKILL)."""

    startup = 0.0  # seconds before a child starts working (where a timer kill is wasted)

    def start(self, args: list[str], failpoint: str | None) -> Any:
        raise NotImplementedError

    def wait(self, child: Any, timeout: float) -> int | None:
        """The child's exit code, or None if it still runs after ``timeout`` seconds."""
        raise NotImplementedError

    def kill(self, child: Any) -> None:
        raise NotImplementedError

    def finish(self, child: Any) -> tuple[int, str]:
        """Wait for the child's end: ``(exit code, stderr)``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class SpawnLauncher(Launcher):
    """``python crash_campaign.py --child ...``: a new interpreter per step (slow start)."""

    startup = 0.12

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def start(self, args: list[str], failpoint: str | None) -> subprocess.Popen[str]:
        env = dict(self.env)
        if failpoint:
            env["AGENTLOG_FAILPOINTS"] = failpoint
        return subprocess.Popen(
            [sys.executable, __file__, "--child", *args],
            cwd=str(ROOT),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self, child: subprocess.Popen[str], timeout: float) -> int | None:
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self, child: subprocess.Popen[str]) -> None:
        child.kill()  # Popen has not reaped it: the pid is still this child's

    def finish(self, child: subprocess.Popen[str]) -> tuple[int, str]:
        _, err = child.communicate(timeout=300)
        return child.returncode, err


class ForkLauncher(Launcher):
    """Children forked from a zygote process that has imported the engine (but opened no
    store and imported no agent): each step is still a process of its own, killed for
    real, without paying for an interpreter start."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.workdir = workdir
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--zygote"],
            cwd=str(ROOT),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        self.n = 0
        self._line(120)  # "ready"

    def _line(self, timeout: float | None) -> dict[str, Any] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise RuntimeError("the zygote died")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def start(self, args: list[str], failpoint: str | None) -> dict[str, Any]:
        self.n += 1
        err = str(self.workdir / f"child-{self.n % 8}.err")
        self._send({"args": args, "failpoint": failpoint, "stderr": err})
        started = self._line(120)
        assert started is not None
        return {"pid": started["pid"], "stderr": err, "code": None}

    def wait(self, child: dict[str, Any], timeout: float) -> int | None:
        if child["code"] is None:
            done = self._line(timeout)
            if done is not None:
                child["code"] = done["code"]
        return child["code"]  # type: ignore[no-any-return]

    def kill(self, child: dict[str, Any]) -> None:
        # The zygote reaps a child only when told to (after its status was read), so
        # this pid cannot have been reused by another process.
        os.kill(child["pid"], signal.SIGKILL)

    def finish(self, child: dict[str, Any]) -> tuple[int, str]:
        code = self.wait(child, 300)
        if code is None:
            raise RuntimeError(f"child {child['pid']} did not finish")
        self._send({"reap": child["pid"]})  # before the next step: a lease's owner is gone
        reaped = self._line(120)
        assert reaped is not None and reaped.get("reaped") == child["pid"]
        return code, Path(child["stderr"]).read_text(errors="replace")

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def zygote() -> int:
    """Read child steps on stdin; fork one process per step; report its pid, then how it
    ended (without reaping it, so its pid stays its own), then reap it when told. The
    engine is imported here once; no store is opened and no agent imported."""
    import traceback

    import engine  # noqa: F401 - preloaded for the children
    from engine import failpoints

    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    while raw := sys.stdin.buffer.readline():
        msg = json.loads(raw)
        pid = os.fork()
        if pid == 0:  # the child: one step, then exit without running the zygote's code
            code = 1
            try:
                fd = os.open(msg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 2)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.environ.pop("AGENTLOG_FAILPOINTS", None)
                if msg["failpoint"]:
                    os.environ["AGENTLOG_FAILPOINTS"] = msg["failpoint"]
                failpoints.reset()
                code = child(msg["args"])
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        out.write(json.dumps({"pid": pid}).encode() + b"\n")
        out.flush()
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert info is not None
        killed = info.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
        code = -info.si_status if killed else info.si_status
        out.write(json.dumps({"pid": pid, "code": code}).encode() + b"\n")
        out.flush()
        assert json.loads(sys.stdin.buffer.readline())["reap"] == pid
        os.waitpid(pid, 0)
        out.write(json.dumps({"reaped": pid}).encode() + b"\n")
        out.flush()
    return 0


# --- the parent ----------------------------------------------------------------------


@dataclass
class Report:
    store: str
    seed: int
    kills: int = 0
    kills_by: Counter[str] = field(default_factory=Counter)
    launches: int = 0
    launches_by: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    rounds_by_agent: Counter[str] = field(default_factory=Counter)
    completed: int = 0
    abandoned: int = 0
    duplicated_effects: int = 0
    lost_effects: int = 0
    final_state_mismatches: int = 0
    anomalies: list[str] = field(default_factory=list)
    elapsed: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "seed": self.seed,
            "kills": self.kills,
            "kills_by": dict(sorted(self.kills_by.items())),
            "launches": self.launches,
            "launches_by": dict(sorted(self.launches_by.items())),
            "truthful_answers": dict(self.answers),
            "rounds": self.rounds,
            "rounds_by_agent": dict(sorted(self.rounds_by_agent.items())),
            "completed": self.completed,
            "abandoned": self.abandoned,
            "duplicated_effects": self.duplicated_effects,
            "lost_effects": self.lost_effects,
            "final_state_mismatches": self.final_state_mismatches,
            "anomalies": self.anomalies,
            "elapsed_seconds": round(self.elapsed, 1),
        }

    @property
    def clean(self) -> bool:
        return not (
            self.duplicated_effects
            or self.lost_effects
            or self.final_state_mismatches
            or self.anomalies
        )


class Campaign:
    def __init__(
        self,
        url: str,
        workdir: Path,
        seed: int,
        ops: int,
        verbose: bool,
        launcher: str,
        agent: str = "mix",
        recover_share: float = 0.3,
    ) -> None:
        from engine import Engine
        from tests.agents import service

        self.url = url
        self.rng = random.Random(seed)
        self.seed = seed
        self.ops = ops
        self.verbose = verbose
        self.service = service
        self.agent_mode = agent
        self.recover_share = recover_share
        self.svc = str(workdir / "service.db")
        self.ref_svc = str(workdir / "reference-service.db")
        service.reset(self.svc)
        service.reset(self.ref_svc)
        self.engine = Engine.open(url)  # the parent only reads the campaign's store
        self.reference = Engine.open("memory://")
        self.report = Report(store=_mask(url), seed=seed)
        self.estimate = 1.0  # seconds an unkilled child takes (moving average)
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"},
            "AGENTLOG_TEST_SERVICE": self.svc,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self.launcher: Launcher = (
            ForkLauncher(self.env, workdir) if launcher == "fork" else SpawnLauncher(self.env)
        )

    def log(self, text: str) -> None:
        if self.verbose:
            print(text, file=sys.stderr, flush=True)

    # --- one child process, maybe killed -------------------------------------------

    def launch(self, args: list[str], points: tuple[str, ...]) -> int:
        roll = self.rng.random()
        plan, failpoint = "none", None
        delay: float | None = None
        unhit = [name for name in points if not self.report.kills_by[name]]
        resend = args[0] == "answer" and args[3] == "not done"
        if unhit:  # every failpoint kills at least once, early in the campaign
            plan = unhit[0]
            failpoint = f"{plan}:1"
        elif resend and roll < 0.5:  # the riskiest moment: the re-send a person allowed
            plan = self.rng.choice(("after_tool", "after_intent"))
            failpoint = f"{plan}:1"
        elif roll < 0.5:
            plan = self.rng.choice(points)
            nth = 1 if self.rng.random() < 0.4 else self.rng.randint(2, 6)
            failpoint = f"{plan}:{min(nth, 3) if plan == 'in_compensation' else nth}"
        elif roll < 0.9:  # a random moment of the child's life
            delay = self.rng.uniform(self.launcher.startup, 1.1 * self.estimate)
            plan = "timer"
        started = time.monotonic()
        child = self.launcher.start(args, failpoint)
        killed_by_timer = False
        if delay is not None and self.launcher.wait(child, delay) is None:
            self.launcher.kill(child)
            killed_by_timer = True
        code, err = self.launcher.finish(child)
        took = time.monotonic() - started
        self.report.launches += 1
        self.report.launches_by[args[0]] += 1
        if code == -signal.SIGKILL:
            self.report.kills += 1
            self.report.kills_by["timer" if killed_by_timer else plan] += 1
        elif code == NOT_RECOVERED:
            self.report.anomalies.append(f"recover did not take over {args[2]} (owner dead)")
        elif code != 0:
            last = (err.strip().splitlines() or ["?"])[-1]
            self.report.anomalies.append(f"{args[0]} {args[2]} exited {code}: {last}")
            self.log(err)
        else:
            self.estimate = 0.8 * self.estimate + 0.2 * took
        self.log(f"  {args[0]:8} {plan:16} rc={code:>3} {took:.2f}s")
        return code

    def unkilled(self, args: list[str]) -> int:
        code, err = self.launcher.finish(self.launcher.start(args, None))
        self.report.launches += 1
        self.report.launches_by[args[0]] += 1
        if code == NOT_RECOVERED:
            self.report.anomalies.append(f"recover did not take over {args[2]} (owner dead)")
        elif code != 0:
            self.report.anomalies.append(f"{args[0]} exited {code}: {err.strip()[-300:]}")
        return code

    # --- one run, to its end -------------------------------------------------------

    def events(self, rid: str) -> list[Any]:
        from engine.errors import RunNotFound, UsageError

        try:
            return self.engine.events(rid)
        except (RunNotFound, UsageError):
            return []

    def truth(self, rid: str, events: list[Any]) -> str:
        """Did the effect the run is unsure of happen? Ask the outside service."""
        asked = [e for e in events if e.type == "human_input_requested"][-1]
        call = asked.data["call"]
        intent = [e for e in events if e.type == "tool_invoked" and e.data["call"] == call][-1]
        tool, op = intent.data["tool"].rsplit(".", 1)[-1], intent.data["args"]["op"]
        happened = self.service.by_op(tool, op, self.svc) is not None
        answer = "done" if happened else "not done"
        self.report.answers[answer] += 1
        return answer

    def drive(self, rid: str, data: dict[str, Any], abandon: bool, kind: str) -> str:
        module = agent_module(kind)
        reached_question = False
        streak = 0
        while True:
            events = self.events(rid)
            state = self.engine.state(rid) if events else None
            if state is not None and state.status in ("completed", "abandoned"):
                return state.status
            if state is None:
                args, points = ["run", self.url, rid, json.dumps(data), kind], RUN_FAILPOINTS
            elif abandon and (reached_question or state.waiting == module.COMMIT_QUESTION):
                reached_question = True
                args, points = ["abandon", self.url, rid], ABANDON_FAILPOINTS
            elif state.status == "paused":
                asked = [e for e in events if e.type == "human_input_requested"][-1]
                if asked.data.get("reason") == "uncertain":
                    value = self.truth(rid, events)
                else:
                    value = "yes"
                args, points = ["answer", self.url, rid, value], RUN_FAILPOINTS
            else:
                if state.status == "failed":
                    self.report.anomalies.append(f"run {rid} failed: {state.error}")
                # Its owner was killed: resume it, or let recover() find the dead owner.
                recover = state.status == "running" and self.rng.random() < self.recover_share
                args = ["recover" if recover else "resume", self.url, rid]
                points = RUN_FAILPOINTS
            # After a long streak of kills, one launch without any, to make progress.
            code = self.unkilled(args) if streak >= 30 else self.launch(args, points)
            streak = streak + 1 if code == -signal.SIGKILL else 0
            if len(self.report.anomalies) > 20:
                raise RuntimeError("too many anomalies: " + "; ".join(self.report.anomalies))

    def reference_round(
        self, data: dict[str, Any], abandon: bool, kind: str
    ) -> tuple[str, Any, Any]:
        os.environ["AGENTLOG_TEST_SERVICE"] = self.ref_svc
        r = self.reference.run(agent_of(kind), **data)
        if r.status == "paused" and abandon:
            r = self.reference.abandon(r.run_id)
        elif r.status == "paused":
            r = self.reference.answer(r.run_id, "yes")
        return r.status, r.output, _journal(self.reference, r.run_id)

    def kind(self, n: int) -> str:
        """The agent of round ``n``: both rounds of a fee pair run the same one."""
        if self.agent_mode in AGENTS:
            return self.agent_mode
        return AGENTS[(n // 2) % 2]

    def round(self, n: int) -> None:
        order = f"r{n}"
        abandon = n % 3 == 2
        kind = self.kind(n)
        data = {"order": order, "ops": self.ops, "group": f"g{n // 2}", "confirm": n % 3 != 0}
        rid = f"campaign-{self.seed}-{n}-{uuid.uuid4().hex[:6]}"
        kills_before = self.report.kills
        want_status, want_output, want_journal = self.reference_round(data, abandon, kind)
        status = self.drive(rid, data, abandon, kind)
        self.report.rounds += 1
        self.report.rounds_by_agent[kind] += 1
        self.report.completed += status == "completed"
        self.report.abandoned += status == "abandoned"
        output = self.engine.state(rid).output
        if status != want_status or (status == "completed" and output != want_output):
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"round {n}: {status} {output!r} != uncrashed {want_status} {want_output!r}"
            )
        elif _journal(self.engine, rid) != want_journal:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(f"round {n}: its calls differ from the uncrashed run's")
        self._check_log(rid)
        self.log(
            f"round {n} ({kind}): {status} after {self.report.kills - kills_before} kills "
            f"(total {self.report.kills})"
        )

    def _check_log(self, rid: str) -> None:
        """Every call the run made has exactly one outcome; keys never change per call."""
        outcomes: Counter[int] = Counter()
        keys: dict[int, set[str | None]] = {}
        for e in self.engine.events(rid):
            if e.type == "tool_invoked":
                keys.setdefault(e.data["call"], set()).add(e.data.get("key"))
            elif e.type == "tool_succeeded":
                outcomes[e.data["call"]] += 1
        for call, ks in keys.items():
            if len(ks) != 1:
                self.report.anomalies.append(f"run {rid} call {call} used keys {ks}")
        if set(outcomes) != set(keys) or any(v != 1 for v in outcomes.values()):
            self.report.anomalies.append(f"run {rid}: calls without exactly one outcome")

    def compare_books(self) -> None:
        """The service's books after the campaign against the uncrashed run's."""
        got, want = self.service.effects(self.svc), self.service.effects(self.ref_svc)
        self.report.duplicated_effects = sum(c - 1 for c in got.values() if c > 1)
        self.report.lost_effects = sum(max(0, want[k] - got[k]) for k in want)
        extra = [k for k in got if k not in want]
        got_voids = self.service.voids(self.svc)
        want_voids = self.service.voids(self.ref_svc)
        self.report.lost_effects += len(want_voids - got_voids)
        if extra or got_voids - want_voids:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"effects the uncrashed run did not make: {extra} {got_voids - want_voids}"
            )

    def run(self, kills: int, max_seconds: float | None) -> Report:
        started = time.monotonic()
        n = 0
        while self.report.kills < kills or n % 2:  # finish a fee pair
            if max_seconds and time.monotonic() - started > max_seconds and n % 2 == 0:
                self.report.anomalies.append(
                    f"stopped after {max_seconds:.0f} s with {self.report.kills} kills"
                )
                break
            self.round(n)
            n += 1
        self.compare_books()
        self.report.elapsed = time.monotonic() - started
        return self.report

    def close(self) -> None:
        self.launcher.close()
        self.engine.close()
        self.reference.close()


def _journal(engine: Any, rid: str) -> list[tuple[Any, ...]]:
    """What a run did, call by call, as the agent saw it: decisions and their values, tool
    calls and their results (a person's 'done' stands in for the result of a tool nobody
    could verify, so those are compared by tool only), checkpoints, then compensations in
    the order they ran. Calls are listed by call identity: concurrent calls (gather)
    finish, and so are recorded, in an order a crash may change, but each must keep its
    identity, tool and result."""
    out: list[tuple[Any, ...]] = []
    undo: list[tuple[Any, ...]] = []
    for e in engine.events(rid):
        d = e.data
        if e.type == "tool_succeeded":
            human = d["tool"] in _human_tools()
            out.append(("tool", d["call"], d["tool"], None if human else d["result"]))
        elif e.type == "llm_decided":
            out.append(("decide", d["call"], d["name"], d["value"]))
        elif e.type == "checkpoint":
            out.append(("checkpoint", d["call"], d["name"]))
        elif e.type == "compensated":
            undo.append(("compensated", d["call"], d["tool"], d.get("error")))
    return sorted(out, key=lambda x: (x[1], x[0])) + undo


def _human_tools() -> tuple[str, ...]:
    return (*agent_module("sync").HUMAN_TOOLS, *agent_module("async").HUMAN_TOOLS)


def _mask(url: str) -> str:
    from engine.store.url import mask

    return mask(url)


def _pg_schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema={schema}"


def _drop_schema(url: str) -> None:
    import psycopg

    schema = dict(parse_qsl(urlsplit(url).query)).get("schema")
    if schema and schema != "public":
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _seed_from_env() -> int | None:
    """``$AGENTLOG_CAMPAIGN_SEED`` if set (None, reported, when it is not an integer),
    else a fresh random seed."""
    raw = os.environ.get(SEED_ENV, "").strip()
    if not raw:
        return random.randrange(1 << 30)
    try:
        return int(raw)
    except ValueError:
        print(f"crash_campaign: {SEED_ENV}={raw!r} is not an integer", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    if argv[:1] == ["--zygote"]:
        return zygote()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=200, help="SIGKILLs to deliver (at least)")
    p.add_argument(
        "--store", default="sqlite", help="sqlite or postgres (memory is not allowed: it dies)"
    )
    p.add_argument("--url", help="the store URL (default: a fresh file / a fresh schema)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"the random seed (default ${SEED_ENV}, else random; printed at start)",
    )
    p.add_argument("--ops", type=int, default=16, help="side-effecting operations per run")
    p.add_argument("--max-seconds", type=float, default=None, help="stop early (reported)")
    p.add_argument("--workdir", help="where the service books (and SQLite store) go")
    p.add_argument(
        "--launcher",
        choices=("fork", "spawn"),
        default="fork",
        help="fork children from a preloaded zygote (fast) or spawn a new interpreter each",
    )
    p.add_argument(
        "--agent",
        choices=("sync", "async", "mix"),
        default="mix",
        help="the campaign agent: sync, async (gathered async tools), or mix (pairs alternate)",
    )
    p.add_argument(
        "--recover-share",
        type=float,
        default=0.3,
        help="share of steps after a kill taken by engine.recover() instead of resume",
    )
    p.add_argument("--keep", action="store_true", help="keep the store and books")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="every launch on stderr")
    a = p.parse_args(argv)

    store = a.store.lower()
    if store.startswith("memory") or (a.url or "").startswith("memory"):
        print(
            "crash_campaign: a memory store dies with its process; use sqlite or postgres",
            file=sys.stderr,
        )
        return 2
    if store not in ("sqlite", "postgres", "postgresql"):
        print(f"crash_campaign: unknown store {a.store!r} (sqlite, postgres)", file=sys.stderr)
        return 2
    if not 0.0 <= a.recover_share <= 1.0:
        print("crash_campaign: --recover-share must be between 0 and 1", file=sys.stderr)
        return 2
    if a.kills < 1 or a.ops < 1:
        print("crash_campaign: --kills and --ops must be positive", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else _seed_from_env()
    if seed is None:
        return 2
    print(
        f"crash_campaign: seed {seed} (repeat with --seed {seed} or {SEED_ENV}={seed})",
        file=sys.stderr,
        flush=True,
    )
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="agentlog-campaign-"))
    workdir.mkdir(parents=True, exist_ok=True)
    fresh_schema = False
    if a.url:
        url = a.url
    elif store == "sqlite":
        url = f"sqlite:///{workdir / 'campaign.db'}"
    else:
        url = _pg_schema_url(DEFAULT_PG, f"campaign_{seed}_{uuid.uuid4().hex[:6]}")
        fresh_schema = True

    campaign = Campaign(url, workdir, seed, a.ops, a.verbose, a.launcher, a.agent, a.recover_share)
    try:
        report = campaign.run(a.kills, a.max_seconds)
    finally:
        campaign.close()
        if not a.keep:
            if fresh_schema:
                _drop_schema(url)
            if not a.workdir:
                shutil.rmtree(workdir, ignore_errors=True)
    if report.kills < a.kills:
        report.anomalies.append(f"only {report.kills} of {a.kills} kills delivered")
    result = report.as_dict()
    if a.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:24} {v}")
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
