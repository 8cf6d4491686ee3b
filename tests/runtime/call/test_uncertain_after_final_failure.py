"""One rule for "may this call's effect exist?": a keyed side effect whose first attempt
ended unknown (indeterminate) and whose last attempt failed for good ended the run, but
the first attempt may have landed. Resuming the failed run resolves that doubt as any
uncertain call's (ledger, verifier, a same-key re-send, or a person) before anything is
sent again, and never frees the business key while the effect may exist - as rewind and
abandon read it (``Effect.uncertain``)."""

from __future__ import annotations

from typing import Any

from conftest import all_backends

from engine import Engine, Indeterminate, Permanent, RetryPolicy


class Payments:
    """A payment service without idempotency keys that counts every charge it books.
    The first request lands but its answer is lost; the second is declined. Its lookup
    lags: the first time it is asked it does not see the charge yet."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.booked: list[dict[str, Any]] = []
        self.lookups = 0
        self.script: list[BaseException] = [
            Indeterminate("the connection dropped after the request was sent"),
            Permanent("402: the card was declined"),
        ]

    def charge(self, order: str) -> dict[str, Any]:
        self.sent.append(order)
        failure = self.script.pop(0) if self.script else None
        if failure is None or isinstance(failure, Indeterminate):
            self.booked.append({"order": order, "charge": f"ch_{len(self.sent)}"})
        if failure is not None:
            raise failure
        return self.booked[-1]

    def lookup(self, key: str) -> dict[str, Any] | None:
        self.lookups += 1
        if self.lookups == 1:
            return None  # not replicated yet
        order = key.removeprefix("charge:")
        return next((c for c in self.booked if c["order"] == order), None)


def _agent(eng: Engine, pay: Payments, name: str) -> Any:
    @eng.tool(
        side_effect=True,
        key=lambda order: f"charge:{order}",
        verify=pay.lookup,
        retry=RetryPolicy(max_attempts=2, initial=0.0, maximum=0.0),
        name=f"{name}_charge",
    )
    def charge(order: str) -> dict[str, Any]:
        return pay.charge(order)

    @eng.agent(name=f"tests:{name}")
    def agent(run: Any, order: str) -> dict[str, Any]:
        return charge(order)

    return agent


@all_backends
def test_resume_asks_the_verifier_before_charging_again(eng: Engine) -> None:
    """The verifier, asked again on resume, now sees the first charge: the run takes it,
    sends nothing, and the order is charged once."""
    pay = Payments()
    agent = _agent(eng, pay, "unsure_verify")
    first = eng.run(agent, order="o1")
    assert first.status == "failed" and pay.sent == ["o1", "o1"]
    again = eng.resume(first.run_id)
    assert pay.booked == [{"order": "o1", "charge": "ch_1"}], "charged twice"
    assert (again.status, again.output) == ("completed", pay.booked[0])
    assert pay.sent == ["o1", "o1"]
