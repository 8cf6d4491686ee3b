"""The model workload (``--agent model``): the flat campaign's rounds, run by an agent
whose decisions return pydantic models, stream and hit 429s (campaign/model_agent.py),
against a real local model server in this (the driver's) process
(campaign/model_server.py).

Counted besides the flat campaign's damage, all of which must be 0:

- duplicated decisions: a model request for a decision the store already records (the
  server looks it up as the request arrives);
- mismatched values: a value the agent got, live or replayed, that is not of the
  model's type or not equal to the model's answer (a plan not a ``Plan``, a summary not
  the whole text), and a stream cut by a kill that was never asked for again, whole;
- usage mismatches (in the final-state mismatches): a run's token count that differs
  from its uncrashed twin's (usage counted once per recorded decision).

Kills land at the engine's failpoints, ``after_decision`` (a model call returned, its
decision not recorded) and ``campaign_mid_stream`` (half a stream read), and at random
moments (in a 429's backoff, mid-stream, mid-effect).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from engine import Engine
from engine.errors import RunNotFound, UsageError

from .model_server import URL_ENV, ModelServer
from .rounds import RUN_FAILPOINTS, Campaign

MODEL_FAILPOINTS = (*RUN_FAILPOINTS, "after_decision", "campaign_mid_stream")


class ModelCampaign(Campaign):
    """Rounds of the model agent on one store; ``run`` returns the report."""

    run_failpoints = MODEL_FAILPOINTS

    def __init__(
        self,
        url: str,
        workdir: Path,
        seed: int,
        ops: int,
        verbose: bool,
        launcher: str,
        recover_share: float = 0.3,
    ) -> None:
        self.looker = Engine.open(url)  # the server's own reader of the store
        self.looker_lock = threading.Lock()
        self.model = ModelServer(self.recorded)
        os.environ[URL_ENV] = self.model.url  # the reference runs, in this process
        env = {URL_ENV: self.model.url}
        super().__init__(url, workdir, seed, ops, verbose, launcher, "model", recover_share, env)
        self.report.model = True

    def recorded(self, run_id: str, name: str) -> bool:
        """Whether the campaign's store records the decision ``name`` of ``run_id``."""
        if not run_id.startswith("campaign-"):  # (the campaign's run ids: rounds.py)
            return False  # a reference run: in the driver's memory store
        with self.looker_lock:
            try:
                log = self.looker.events(run_id)
            except (RunNotFound, UsageError):
                return False
        return any(e.type == "llm_decided" and e.data["name"] == name for e in log)

    def kind(self, n: int) -> str:
        return "model"

    def check_round(self, n: int, rid: str, ref_rid: str) -> None:
        """The run's token count against its uncrashed twin's."""
        got, want = self.engine.state(rid), self.reference.state(ref_rid)
        if (got.tokens_in, got.tokens_out) != (want.tokens_in, want.tokens_out):
            self.report.final_state_mismatches += 1
            self.report.anomalies.append(
                f"round {n}: tokens {got.tokens_in}/{got.tokens_out} != uncrashed "
                f"{want.tokens_in}/{want.tokens_out}"
            )

    def run(self, kills: int, max_seconds: float | None) -> Any:
        report = super().run(kills, max_seconds)
        books = self.model.books
        report.duplicated_decisions = len(books.duplicated)
        report.mismatched_values = len(books.mismatches)
        never = books.streams_cut - books.streams_done
        report.mismatched_values += len(never)
        report.anomalies += [f"duplicated decision: {d}" for d in books.duplicated[:10]]
        report.anomalies += [f"mismatched value: {m}" for m in books.mismatches[:10]]
        report.anomalies += [f"stream cut, never asked again whole: {k}" for k in sorted(never)]
        report.model_books = books.as_dict()
        return report

    def close(self) -> None:
        super().close()
        self.model.close()
        self.looker.close()
