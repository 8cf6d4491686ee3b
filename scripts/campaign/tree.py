"""The tree workload: rounds of run trees (root -> branches -> leaves, campaign/tree_agent.py)
driven to their end by child steps killed at random moments and at every failpoint,
including while a branch holds the order's lock and while a leaf sleeps; continued by
``engine.recover()``, ``agentlog recover`` and ``resume`` in fresh processes; then
compared with the same tree run uncrashed.

Counted, all of which must be 0: duplicated and lost effects (the outside service's
books against the uncrashed run's), duplicated and lost messages (each branch receives
its peers list and its sibling's two tokens exactly once; nothing is posted twice to an
inbox, nothing posted is left unconsumed), two holders of one lock at once (see
campaign/holds.py: a token given twice, live holds overlapping in time, a write refused
to a holder that held its token throughout), and final-state mismatches (a node not
completed, the root's output).

Reported besides, and not damage: writes the fenced service refused because a higher
token had been seen, from holders resumed since they took their token. That is the
fencing pattern at work: a branch killed while holding the lock stays dead past the
lease's ttl, a sibling takes the lock (a higher token) and writes, and when the killed
branch is recovered its replayed block carries its recorded, now stale, token (replay
is deterministic; docs/locks.md): the service refuses it, and the branch takes the lock
again (a new block, a new token) and writes. No write under a stale token takes effect.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from engine.errors import RunBusy, UsageError
from engine.kinds import SETTLED, RunStatus
from engine.log.waiting import Child, Timer

from . import fenced, holds
from .child import INLINE_WAIT_ENV, agent_of
from .rounds import RUN_FAILPOINTS, Campaign

# The engine's (after_send, after_recv, in_sleep: messages and timers) and the
# workload's own (campaign_in_lock: holding the lock, its write not sent;
# campaign_in_sleep: halfway through a leaf's inline sleep).
TREE_FAILPOINTS = (
    *RUN_FAILPOINTS,
    "after_send",
    "after_recv",
    "in_sleep",
    "campaign_in_lock",
    "campaign_in_sleep",
)
NAPS = [0.2, 1.0]  # a leaf's sleep: inline, or long enough to suspend it
INLINE_WAIT = 0.5  # in the campaign's processes: the 1 s naps suspend their leaf
STUCK = 40  # unkilled steps in a row that change nothing: the round is stuck


class TreeCampaign(Campaign):
    """Rounds of trees on one store; ``run`` returns the report."""

    pair = 1  # trees share nothing: the campaign may end after any round
    run_failpoints = TREE_FAILPOINTS

    def __init__(
        self,
        url: str,
        workdir: Path,
        seed: int,
        verbose: bool,
        launcher: str,
        recover_share: float = 0.5,
        shape: tuple[int, int, int] = (3, 2, 2),
    ) -> None:
        width, leaves, ops = shape
        self.shape = {"width": width, "leaves": leaves, "ops": ops, "naps": NAPS}
        self.tree_svc = str(workdir / "tree-service.db")
        self.ref_tree_svc = str(workdir / "tree-reference-service.db")
        fenced.reset(self.tree_svc)
        fenced.reset(self.ref_tree_svc)
        env = {
            "AGENTLOG_TREE_SERVICE": self.tree_svc,
            "AGENTLOG_URL": url,
            INLINE_WAIT_ENV: str(INLINE_WAIT),
        }
        super().__init__(url, workdir, seed, 1, verbose, launcher, "sync", recover_share, env)
        self.report.tree = True

    # --- the tree as the store holds it ------------------------------------------------

    def state(self, rid: str) -> Any:
        return self.engine.state(rid) if self.events(rid) else None

    def nodes(self, rid: str) -> list[tuple[str, int]]:
        """The runs of the tree under ``rid`` with their depths, parents first."""
        out, todo = [], [(rid, 0)]
        while todo:
            run_id, depth = todo.pop(0)
            out.append((run_id, depth))
            kids = [
                e.data["child_run_id"]
                for e in self.events(run_id)
                if e.type in ("child_spawned", "child_restarted")
            ]
            todo += [(k, depth + 1) for k in dict.fromkeys(kids)]
        return out

    def size(self, nodes: list[tuple[str, int]]) -> int:
        return sum(len(self.events(r)) for r, _ in nodes)

    def until_due(self, nodes: list[tuple[str, int]]) -> None:
        """When nothing in the tree runs and a leaf sleeps (a timer, not a receive's far
        deadline), wait until its timer is due."""
        states = [self.state(r) for r, _ in nodes]
        if any(s is not None and s.status == RunStatus.RUNNING for s in states):
            return
        due = [
            s.wake_at
            for s in states
            if s is not None and s.wake_at and isinstance(s.waits_on, Timer)
        ]
        if due:
            time.sleep(min(2.0, max(0.0, min(due) - time.time()) + 0.05))

    def asker(self, nodes: list[tuple[str, int]]) -> str | None:
        """The deepest run of the tree paused on a question of its own (not on a child's:
        a parent still paused on a child that was answered, then killed, is not)."""
        asking = [
            (d, r)
            for r, d in nodes
            if self.state(r).status == RunStatus.PAUSED
            and not isinstance(self.state(r).waits_on, Child)
        ]
        return max(asking)[1] if asking else None

    def interrupted(self, nodes: list[tuple[str, int]]) -> None:
        """After a kill: which runs it left running, by depth, and whether one held a lock
        (acquired, not released) or slept (its last record a timer)."""
        seen: set[str] = set()
        for run_id, depth in nodes:
            events = self.events(run_id)
            if not events or self.engine.state(run_id).status != RunStatus.RUNNING:
                continue
            seen.add(("root", "child", "grandchild")[min(depth, 2)])
            held = Counter(e.data["call"] for e in events if e.type == "lock_acquired")
            held.subtract(e.data["call"] for e in events if e.type == "lock_released")
            if any(v > 0 for v in held.values()):
                seen.add("holding_lock")
            if events[-1].type == "timer_set":
                seen.add("sleeping")
        self.report.kills_interrupting.update(seen)
        self.log(f"    the kill interrupted: {', '.join(sorted(seen)) or 'nothing running'}")

    # --- one tree, to its end ----------------------------------------------------------

    def step(self, rid: str, data: dict[str, Any], root: Any, nodes: list[Any]) -> list[str]:
        """The next child step for the tree whose root is in ``root``."""
        if root is None:
            return ["run", self.url, rid, json.dumps(data), "tree"]
        asker = self.asker(nodes) if root.status == RunStatus.PAUSED else None
        if asker is not None:
            target = rid if self.rng.random() < 0.5 else asker
            return ["answer", self.url, target, "yes"]
        self.until_due(nodes)
        roll = self.rng.random()
        if root.status == RunStatus.RUNNING and roll > self.recover_share:
            return ["resume", self.url, rid]
        return ["cli-recover" if roll < self.recover_share / 2 else "recover-all", self.url, "-"]

    def drive(self, rid: str, data: dict[str, Any], abandon: bool = False, kind: str = "") -> str:
        streak = idle = 0
        while True:
            nodes = self.nodes(rid)
            root = self.state(rid)
            if root is not None and root.status in SETTLED:
                return str(root.status)
            args = self.step(rid, data, root, nodes)
            before = self.size(nodes)
            code = self.unkilled(args) if streak >= 30 else self.launch(args, self.run_failpoints)
            if code == -signal.SIGKILL:
                streak += 1
                self.interrupted(self.nodes(rid))
                continue
            streak = 0
            idle = idle + 1 if self.size(self.nodes(rid)) == before else 0
            if idle >= STUCK:
                self.report.anomalies.append(f"tree {rid} made no progress in {idle} steps")
                return str(root.status if root is not None else "none")
            if len(self.report.anomalies) > 20:
                raise RuntimeError("too many anomalies: " + "; ".join(self.report.anomalies))

    def reference_tree(self, data: dict[str, Any]) -> Any:
        """The same tree, uncrashed, on the memory store (its own service books)."""
        import os

        os.environ["AGENTLOG_TREE_SERVICE"] = self.ref_tree_svc
        r = self.reference.run(agent_of("tree"), **data)
        deadline = time.monotonic() + 600
        races = 0
        while r.status not in SETTLED and time.monotonic() < deadline:
            if r.status == RunStatus.PAUSED:
                try:
                    r = self.reference.answer(r.run_id, "yes")
                except (RunBusy, UsageError):
                    # The root came back paused while the asking leaf's (or its
                    # branch's) thread was still pausing: in-process, so wait a little.
                    races += 1
                    if races > 200:
                        raise
                    time.sleep(0.05)
                    r = self.reference.state(r.run_id)
                continue
            time.sleep(0.1)
            self.reference.recover()
            r = self.reference.state(r.run_id)
        if r.status != RunStatus.COMPLETED:
            raise RuntimeError(f"the uncrashed tree did not complete: {r.status} {r.error}")
        return r

    def round(self, n: int) -> None:
        order = f"t{n}"
        data = {"order": order, **self.shape, "ask": n % 3 == 1}
        rid = f"tree-{self.seed}-{n}-{uuid.uuid4().hex[:6]}"
        kills_before = self.report.kills
        want = self.reference_tree(data)
        status = self.drive(rid, data)
        self.report.rounds += 1
        self.report.rounds_by_agent["tree"] += 1
        self.report.completed += status == RunStatus.COMPLETED
        self.check_tree(n, rid, want)
        self.log(
            f"round {n} (tree): {status} after {self.report.kills - kills_before} kills "
            f"(total {self.report.kills})"
        )

    # --- what is counted -----------------------------------------------------------------

    def check_tree(self, n: int, rid: str, want: Any) -> None:
        nodes = self.nodes(rid)
        expected = 1 + self.shape["width"] * (1 + self.shape["leaves"])  # type: ignore[operator]
        states = {r: self.engine.state(r) for r, _ in nodes}
        unfinished = [r for r, s in states.items() if s.status != RunStatus.COMPLETED]
        output = states[rid].output
        if unfinished or len(nodes) != expected or output != want.output:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"round {n}: {len(nodes)} runs, unfinished {unfinished}, output "
                f"{output!r} != uncrashed {want.output!r}"
            )
        for run_id, depth in nodes:
            self._check_log(run_id)
            self.check_messages(run_id, depth)
        self.check_fences(nodes)

    def check_messages(self, run_id: str, depth: int) -> None:
        """Each branch consumed its three messages once; no inbox got one twice or kept one."""
        from engine.store.base import stream_id

        got = [e.data for e in self.events(run_id) if e.type == "message_received"]
        ids = [d["message_id"] for d in got if d["message_id"] is not None]
        self.report.duplicated_messages += len(ids) - len(set(ids))
        wanted = 3 if depth == 1 else 0  # a branch: its peers list and two tokens
        self.report.lost_messages += max(0, wanted - len(set(ids)))
        inbox = self.engine.store.read(stream_id("inbox:" + run_id))
        posted = Counter(r.event.message_id for r in inbox)
        self.report.duplicated_messages += sum(c - 1 for c in posted.values())
        self.report.lost_messages += len(set(posted) - set(ids))

    def check_fences(self, nodes: list[tuple[str, int]]) -> None:
        """No token given to two runs, no two live holds of one lock at once."""
        runs = [r for r, _ in nodes]
        found = holds.shared_tokens(self.events, runs) + holds.overlapping_holds(self.events, runs)
        self.report.two_lock_holders += len(found)
        self.report.anomalies += [f"two holders: {f}" for f in found]

    def compare_books(self) -> None:
        """The service's books after the campaign against the uncrashed trees'."""
        got, want = fenced.effects(self.tree_svc), fenced.effects(self.ref_tree_svc)
        self.report.duplicated_effects = sum(c - 1 for c in got.values() if c > 1)
        self.report.lost_effects = sum(max(0, want[k] - got[k]) for k in want)
        extra = sorted(set(got) - set(want))
        if extra:
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(f"effects the uncrashed trees did not make: {extra}")
        shared, refused = fenced.holders(self.tree_svc)
        self.report.two_lock_holders += shared
        if shared:
            self.report.anomalies.append(f"the fenced service saw {shared} tokens of two holders")
        self.report.stale_writes_refused = refused
        for holder, fence, text in fenced.refused(self.tree_svc):
            self.report.refused_writes.append(text)
            if holds.held_throughout(self.events, holder, fence):  # never down: not stale
                self.report.two_lock_holders += 1
                self.report.anomalies.append(f"two holders: refused while held: {text}")
