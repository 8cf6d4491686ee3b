"""The parent: rounds of runs, each driven to its end by child steps killed at random
moments and failpoints, then compared with the same round run uncrashed."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from engine.kinds import FINAL, RunStatus

from . import storeloss
from .child import NOT_RECOVERED, STOPPED, agent_module, agent_of
from .launchers import ROOT, ForkLauncher, Launcher, SpawnLauncher
from .report import Report, journal

RUN_FAILPOINTS = ("after_intent", "after_tool", "after_outcome", "in_snapshot")
ABANDON_FAILPOINTS = ("in_compensation", "in_compensation", "in_snapshot")
AGENTS = ("sync", "async")
TRIES = 12
STEP_LIMIT = 240.0  # seconds a step may take before the watchdog kills it (reported)


class Campaign:
    """Rounds of runs on one store, each driven to its end under kills and compared with
    the same round run uncrashed; ``run`` returns the report."""

    pair = 2  # rounds come in pairs (two runs share a fee): the campaign ends on a pair
    run_failpoints: tuple[str, ...] = RUN_FAILPOINTS  # where a step of a run may be killed
    store_loss = 0.0  # share of steps that lose the store after an effect (storeloss.py)

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
        extra_env: dict[str, str] | None = None,
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
        self.estimates: dict[str, float] = {}  # seconds an unkilled step takes (moving average)
        self.ref_rid = ""  # the last reference run
        self.tries: Counter[str] = Counter()  # launches armed to reach an unhit failpoint
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"},
            "AGENTLOG_TEST_SERVICE": self.svc,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
            **(extra_env or {}),
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
        # A point no launch reached in TRIES tries (nothing left to kill there) is let be.
        unhit = [
            name for name in points if not self.report.kills_by[name] and self.tries[name] < TRIES
        ]
        resend = args[0] == "answer" and args[3] == "not done"
        if unhit:  # every failpoint kills at least once, early in the campaign
            plan = unhit[0]
            failpoint = f"{plan}:1"
            self.tries[plan] += 1
        elif resend and roll < 0.5:  # the riskiest moment: the re-send a person allowed
            plan = self.rng.choice(("after_tool", "after_intent"))
            failpoint = f"{plan}:1"
        elif roll < 0.5:
            plan = self.rng.choice(points)
            nth = 1 if self.rng.random() < 0.4 else self.rng.randint(2, 6)
            failpoint = f"{plan}:{min(nth, 3) if plan == 'in_compensation' else nth}"
        elif roll < 0.9:  # a random moment of the child's life
            estimate = self.estimates.get(self.step_kind(args), 1.0)
            delay = self.rng.uniform(self.launcher.startup, 1.1 * estimate)
            plan = "timer"
        if self.store_loss and (self.rng.random() < self.store_loss or self.must_lose(args)):
            failpoint, delay, plan = self.losing(failpoint, delay, plan)
        started = time.monotonic()
        child = self.launcher.start(args, failpoint)
        killed_by_timer = False
        if delay is not None and self.launcher.wait(child, delay) is None:
            self.launcher.kill(child)
            killed_by_timer = True
        code, err = self.finish(child, args)
        took = time.monotonic() - started
        self.report.launches += 1
        self.report.launches_by[args[0]] += 1
        if code == -signal.SIGKILL:
            self.report.kills += 1
            self.report.kills_by["timer" if killed_by_timer else plan] += 1
            self.report.kills_by_step[args[0]] += 1
        elif code == NOT_RECOVERED:
            self.report.anomalies.append(f"recover did not take over {args[2]} (owner dead)")
        elif code != 0 and storeloss.MARK in err:  # its own store I/O failed with the loss
            self.report.ended_by_store_loss += 1
            self.log(err)
        elif code != 0:
            last = (err.strip().splitlines() or ["?"])[-1]
            self.report.anomalies.append(f"{args[0]} {args[2]} exited {code}: {last}")
            self.log(err)
        else:
            kind = self.step_kind(args)
            self.estimates[kind] = 0.8 * self.estimates.get(kind, 1.0) + 0.2 * took
        self.log(f"  {args[0]:8} {plan:16} rc={code:>3} {took:.2f}s")
        return code

    def losing(
        self, failpoint: str | None, delay: float | None, plan: str
    ) -> tuple[str, float | None, str]:
        """A launch armed to lose the store when a tool returns (its first, second or
        third); until one such loss stopped a run, the first and without a kill besides,
        so that the campaign sees one."""
        self.report.store_losses += 1
        nth = self.rng.randint(1, 3)
        if not self.report.stopped_by_store_loss:
            failpoint, delay, plan, nth = None, None, "none", 1
        lose = f"{storeloss.POINT}:{nth}"
        return (f"{failpoint},{lose}" if failpoint else lose), delay, plan

    def must_lose(self, args: list[str]) -> bool:
        """Until a loss stopped a run, every round's first step loses the store: it is the
        one sure to call a tool (a resume or an answer may have none left to call)."""
        return args[0] == "run" and not self.report.stopped_by_store_loss

    def step_kind(self, args: list[str]) -> str:
        """Which steps share an estimate of how long an unkilled one takes (the moment
        a timer kill aims at): all of them, unless a workload tells them apart."""
        return ""

    def finish(self, child: Any, args: list[str]) -> tuple[int, str]:
        """How the step ended; one that outlives STEP_LIMIT is killed and reported."""
        if self.launcher.wait(child, STEP_LIMIT) is None:
            self.launcher.kill(child)
            code, err = self.launcher.finish(child)
            self.report.hung_steps += 1
            self.report.anomalies.append(f"{args[0]} {args[2]} hung: killed after {STEP_LIMIT:g} s")
            return 1, err
        code, err = self.launcher.finish(child)
        self.report.stopped_by_store_loss += err.count(STOPPED)
        return code, err

    def unkilled(self, args: list[str]) -> int:
        code, err = self.finish(self.launcher.start(args, None), args)
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
        receipt = self.service.by_op(tool, op, self.svc)
        self.report.answers["not done" if receipt is None else "done"] += 1
        # a person who saw the effect gives its result (the tool's return value)
        return "not done" if receipt is None else "given:" + json.dumps({"receipt": receipt})

    def drive(self, rid: str, data: dict[str, Any], abandon: bool, kind: str) -> str:
        module = agent_module(kind)
        reached_question = False
        streak = 0
        while True:
            events = self.events(rid)
            state = self.engine.state(rid) if events else None
            if state is not None and state.status in FINAL:
                return state.status
            if state is None:
                args = ["run", self.url, rid, json.dumps(data), kind]
                points = self.run_failpoints
            elif abandon and (reached_question or state.waiting == module.COMMIT_QUESTION):
                reached_question = True
                args, points = ["abandon", self.url, rid], ABANDON_FAILPOINTS
            elif state.status == RunStatus.PAUSED:
                asked = [e for e in events if e.type == "human_input_requested"][-1]
                if asked.data.get("reason") == "uncertain":
                    value = self.truth(rid, events)
                else:
                    value = "yes"
                args, points = ["answer", self.url, rid, value], self.run_failpoints
            else:
                if state.status == RunStatus.FAILED:
                    self.report.anomalies.append(f"run {rid} failed: {state.error}")
                # Its owner was killed: resume it, or let recover() find the dead owner.
                recover = (
                    state.status == RunStatus.RUNNING and self.rng.random() < self.recover_share
                )
                args = ["recover" if recover else "resume", self.url, rid]
                points = self.run_failpoints
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
        self.ref_rid = r.run_id
        if r.status == RunStatus.PAUSED and abandon:
            r = self.reference.abandon(r.run_id)
        elif r.status == RunStatus.PAUSED:
            r = self.reference.answer(r.run_id, "yes")
        return r.status, r.output, journal(self.reference, r.run_id)

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
        self.report.completed += status == RunStatus.COMPLETED
        self.report.abandoned += status == RunStatus.ABANDONED
        output = self.engine.state(rid).output
        if status != want_status or (status == RunStatus.COMPLETED and output != want_output):
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"round {n}: {status} {output!r} != uncrashed {want_status} {want_output!r}"
            )
        elif journal(self.engine, rid) != want_journal:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(f"round {n}: its calls differ from the uncrashed run's")
        self._check_log(rid)
        self.check_round(n, rid, self.ref_rid)
        self.log(
            f"round {n} ({kind}): {status} after {self.report.kills - kills_before} kills "
            f"(total {self.report.kills})"
        )

    def check_round(self, n: int, rid: str, ref_rid: str) -> None:
        """What a workload checks of round ``n`` besides (its run, its uncrashed twin)."""

    def _check_log(self, rid: str) -> None:
        check_log(self.engine, rid, self.report.anomalies)

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
        while self.report.kills < kills or n % self.pair:  # finish a fee pair
            if max_seconds and time.monotonic() - started > max_seconds and n % self.pair == 0:
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


def check_log(engine: Any, rid: str, anomalies: list[str]) -> None:
    """Every call the run made has exactly one outcome; keys never change per call (what
    is wrong goes to ``anomalies``)."""
    outcomes: Counter[int] = Counter()
    keys: dict[int, set[str | None]] = {}
    for e in engine.events(rid):
        if e.type == "tool_invoked":
            keys.setdefault(e.data["call"], set()).add(e.data.get("key"))
        elif e.type == "tool_succeeded":
            outcomes[e.data["call"]] += 1
    for call, ks in keys.items():
        if len(ks) != 1:
            anomalies.append(f"run {rid} call {call} used keys {ks}")
    if set(outcomes) != set(keys) or any(v != 1 for v in outcomes.values()):
        anomalies.append(f"run {rid}: calls without exactly one outcome")


def _mask(url: str) -> str:
    from engine.store.url import mask

    return mask(url)
