"""The forks workload: per round a receiver, a sender that sends it one message and two
holders of one lock (campaign/forks_agent.py), each driven to its end under kills; then
each rewound (``agentlog rewind``, default reuse, in killed steps): the sender to
before its ``run.send``, the receiver to before its ``recv``, a holder to a position
inside its ``with run.lock(...)`` block.

Counted, all of which must be 0: duplicated and lost effects (each booking stands once
at the ledger: a fork takes its parent's over), duplicated and lost messages (the
receiver's inbox gets one message, the receiver and its fork consume that one, a
sender's fork posts nothing), two holders of one lock (one token given to two runs,
live holds overlapping in time, two writers accepted under one token by the ledger),
final-state mismatches (a run's or a fork's output), anomalies (a fork of a receiver
waiting on its own empty inbox makes no progress: reported).
"""

from __future__ import annotations

import uuid
from collections import Counter

from engine.kinds import RunStatus

from . import holds
from .ledgered import LedgerCampaign
from .rounds import RUN_FAILPOINTS


class ForksCampaign(LedgerCampaign):
    """Rounds of senders, receivers and lock holders, and their forks."""

    run_failpoints = (*RUN_FAILPOINTS, "after_send", "after_recv")

    def round(self, n: int) -> None:
        order = f"f{n}"
        tag = f"{self.seed}-{n}-{uuid.uuid4().hex[:6]}"
        recv, send = f"recv-{tag}", f"send-{tag}"
        holders = {name: f"hold{name}-{tag}" for name in ("A", "B")}
        kills_before = self.report.kills
        self.wanted.update({f"got:{order}": 1, f"sent:{order}": 1})
        for name in holders:
            self.wanted.update({f"fenced:{order}:{name}": 1, f"held:{order}:{name}": 1})
        self.start(recv, {"order": order}, "forks:receiver")
        self.kinds[send] = "forks:sender"
        self.drive(send, {"order": order, "to": recv})
        self.drive(recv, {})
        for name, rid in holders.items():
            self.start(rid, {"order": order, "name": name}, "forks:holder")
        for rid in holders.values():
            self.drive(rid, {})
        outputs = {
            recv: {"got": f"hello {order}"},
            send: {"sent": order},
            **{rid: {"holder": name} for name, rid in holders.items()},
        }
        for rid, want in outputs.items():
            self.finished(rid, want)
        targets = [(send, "ready"), (recv, "listening"), (holders["A"], "locked-1")]
        forks = {rid: self.rewind(rid, to, "reuse") for rid, to in targets}
        for rid, fork in forks.items():
            if fork is not None:
                self.finished(fork, outputs[rid])
                self.report.reusing_rewinds += 1
        self.check_messages_of(recv, forks.get(recv), forks.get(send))
        runs = [*holders.values(), *[f for f in (forks.get(holders["A"]),) if f]]
        found = holds.shared_tokens(self.events, runs) + holds.overlapping_holds(self.events, runs)
        self.report.two_lock_holders += len(found)
        self.report.anomalies += [f"two holders: {f}" for f in found]
        self.report.rounds += 1
        self.report.rounds_by_agent["forks"] += 1
        self.report.completed += all(
            self.engine.state(r).status == RunStatus.COMPLETED for r in outputs
        )
        self.log(f"round {n}: after {self.report.kills - kills_before} kills ({self.report.kills})")

    def check_messages_of(self, recv: str, recv_fork: str | None, send_fork: str | None) -> None:
        """One message posted to the receiver (none by the sender's fork), consumed by the
        receiver once, and the same one by its fork; nothing posted to the fork."""
        from engine.store.base import stream_id

        def posted(rid: str) -> Counter[str]:
            inbox = self.engine.store.read(stream_id("inbox:" + rid))
            return Counter(r.event.message_id for r in inbox)

        def consumed(rid: str) -> list[str]:
            got = [e.data for e in self.events(rid) if e.type == "message_received"]
            return [d["message_id"] for d in got if d["message_id"] is not None]

        sent = posted(recv)
        self.report.duplicated_messages += sum(sent.values()) - 1 if sent else 0
        self.report.lost_messages += 0 if sent else 1
        ids = consumed(recv)
        self.report.duplicated_messages += len(ids) - len(set(ids))
        self.report.lost_messages += len(set(sent) - set(ids))
        if recv_fork is not None:
            again = consumed(recv_fork)
            if set(again) != set(ids) or len(again) != len(set(again)):
                self.report.duplicated_messages += max(0, len(again) - len(set(again)))
                self.report.lost_messages += len(set(ids) - set(again))
                self.report.anomalies.append(f"fork {recv_fork} consumed {again}, parent {ids}")
            self.report.duplicated_messages += sum(posted(recv_fork).values())
