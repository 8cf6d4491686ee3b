"""The saga workload: supervised teams whose siblings have effects (campaign/saga_agent.py)
under one_for_all and rest_for_one, the breaker failing once or twice so that the
supervisor abandons (refunds) and restarts its siblings; every third team (the first
included), once completed, rewound by ``agentlog rewind RUN --to staffed --effects compensate`` (its
children's note and charge refunded, deepest first, and made again by the fork under a
new version of their keys).

Counted, all of which must be 0: duplicated and lost effects (every order's note and
charge stand exactly once at the ledger, refunded ones counted apart), final-state
mismatches (a team's or a fork's output, a team's child that did not end), anomalies.
"""

from __future__ import annotations

import uuid

from engine.kinds import FINAL, RunStatus

from . import saga_agent
from .ledgered import LedgerCampaign
from .rounds import RUN_FAILPOINTS


class SagaCampaign(LedgerCampaign):
    """Rounds of supervised teams on one store; ``run`` returns the report."""

    run_failpoints = (*RUN_FAILPOINTS, "in_compensation")  # a restart's abandon undoes

    def round(self, n: int) -> None:
        order, cents = f"s{n}", 100 + n
        strategy = "team_all" if n % 2 == 0 else "team_rest"
        data = {"order": order, "cents": cents, "fails": 1 + n % 3 % 2}
        rid = f"saga-{self.seed}-{n}-{uuid.uuid4().hex[:6]}"
        kills_before = self.report.kills
        self.wanted.update({f"note:{order}": 1, f"charge:{order}": 1})
        self.kinds[rid] = f"saga:{strategy}"
        self.drive(rid, data)
        want = saga_agent.expected(order, cents)
        self.finished(rid, want)
        self.check_team(rid)
        if n % 3 == 0:
            fork = self.rewind(rid, "staffed", "compensate")
            if fork is not None:
                self.finished(fork, want)
                self.check_team(fork)
                self.report.compensating_rewinds += 1
        self.report.rounds += 1
        self.report.rounds_by_agent[strategy] += 1
        self.report.completed += self.engine.state(rid).status == RunStatus.COMPLETED
        self.log(
            f"round {n} ({strategy}): after {self.report.kills - kills_before} kills "
            f"(total {self.report.kills})"
        )

    def check_team(self, rid: str) -> None:
        """Every run of the team's tree ended (a replaced child abandoned), the children
        doing the spawns' work last completed; restarts counted."""
        nodes = self.nodes(rid)
        for run_id, _ in nodes:
            state = self.engine.state(run_id)
            if state.status not in FINAL:
                self.report.final_state_mismatches += 1
                self.report.anomalies.append(f"team {rid}: {run_id} left {state.status}")
            elif state.status == RunStatus.COMPLETED:  # an abandoned one may end mid-call
                self._check_log(run_id)
        restarts = [e for e in self.events(rid) if e.type == "child_restarted"]
        self.report.restarts += len(restarts)
