"""The bundled demo agent: a support ticket that upgrades a customer and charges a card.

Importable (``replay.demo:support_ticket``) so a run started by ``agentlog demo`` can be
resumed, rewound and verified later by any process. Everything is local and scripted:
the CRM is flaky (its first call in a process times out), the payment service is a
small JSON file beside the store that dedupes by idempotency key (the charge's key is
the business key ``charge:<order>``, so no run, resume or rewind charges an order
twice), and the "model" is a script read through ``run.decide``. The tour that drives
it lives in ``replay.cli.tour``.
"""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from engine import Engine, RetryPolicy, Transient

WORLD_ENV = "AGENTLOG_DEMO_WORLD"
WORLD_FILE = "agentlog-demo-payments.json"

engine = Engine.open()
_crm_calls = 0


# --- the outside world: a fake payment service and a scripted model ---------------------


def world_path() -> str:
    """The payment service's file: ``$AGENTLOG_DEMO_WORLD``, else beside ./agentlog.db."""
    return os.environ.get(WORLD_ENV) or os.path.join(os.getcwd(), WORLD_FILE)


def load_world() -> dict[str, Any]:
    try:
        with open(world_path(), encoding="utf-8") as f:
            world: dict[str, Any] = json.load(f)
    except (OSError, ValueError):
        world = {}
    world.setdefault("charges", {})
    world.setdefault("model_calls", {})
    return world


def _save_world(world: dict[str, Any]) -> None:
    path = world_path()
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(world, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def charges_for(order_id: str) -> list[dict[str, Any]]:
    """Every charge the payment service holds for ``order_id`` (refunded ones included)."""
    return [c for c in load_world()["charges"].values() if c["order_id"] == order_id]


def _next_script_line(name: str, script: list[Any]) -> Any:
    world = load_world()
    n = world["model_calls"].get(name, 0)
    world["model_calls"][name] = n + 1
    _save_world(world)
    return script[n % len(script)]


# --- tools -------------------------------------------------------------------------------


@engine.tool(retry=RetryPolicy(max_attempts=3, initial=0.2, maximum=1.0))
def lookup_customer(customer_id: str) -> dict[str, Any]:
    """Read-only CRM lookup; the first call in each process times out (transient)."""
    global _crm_calls
    _crm_calls += 1
    if _crm_calls == 1:
        raise Transient("CRM timed out (HTTP 504)")
    return {"id": customer_id, "name": "Ada Lovelace", "plan": "basic", "card": "visa 4242"}


def find_charge(idempotency_key: str) -> dict[str, Any] | None:
    """The verifier: ask the payment service whether a charge with this key exists."""
    charge: dict[str, Any] | None = load_world()["charges"].get(idempotency_key)
    return charge


def refund_charge(receipt: dict[str, Any]) -> dict[str, Any]:
    """The compensation: refund a charge (used when a run is abandoned)."""
    world = load_world()
    charge = world["charges"].get(receipt["key"])
    if charge is not None:
        charge["refunded"] = True
        _save_world(world)
    return {"refunded": receipt["charge_id"]}


# The engine always passes the key; its default lets callers (and mypy) leave it out.
@engine.tool(
    side_effect=True,
    # A business key: one charge per order, whichever run, fork or resume asks for it.
    key=lambda order_id, cents: f"charge:{order_id}",
    verify=find_charge,
    compensate=refund_charge,
    retry=RetryPolicy(max_attempts=3, initial=0.1, maximum=1.0),
)
def charge_card(order_id: str, cents: int, *, idempotency_key: str = "") -> dict[str, Any]:
    """Charge the customer's card under ``charge:<order>``; the service returns the first
    charge for a repeated key."""
    world = load_world()
    existing: dict[str, Any] | None = world["charges"].get(idempotency_key)
    if existing is not None:
        return existing
    charge = {
        "charge_id": "ch_" + secrets.token_hex(6),
        "order_id": order_id,
        "cents": cents,
        "key": idempotency_key,
        "refunded": False,
    }
    world["charges"][idempotency_key] = charge
    _save_world(world)
    return charge


@engine.tool
def payment_status(charge_id: str) -> dict[str, Any]:
    """Read-only: the payment service's view of one charge."""
    for c in load_world()["charges"].values():
        if c["charge_id"] == charge_id:
            return {"charge_id": charge_id, "status": "refunded" if c["refunded"] else "paid"}
    return {"charge_id": charge_id, "status": "unknown"}


def triage_model(ticket: dict[str, Any], customer: dict[str, Any]) -> dict[str, Any]:
    """The scripted "model" that decides what the ticket needs."""
    return {
        "action": "upgrade",
        "plan": "pro",
        "cents": 4900,
        "why": f"{customer['name']} asks for {ticket['text']!r} and is on {customer['plan']}",
    }


REPLIES = [
    "Dear {name}, your account is now on Pro. We charged {amount} (receipt {charge}).",
    "Hi {name}! You're on Pro now - enjoy. {amount} was charged, receipt {charge}. Cheers!",
]


def reply_model(customer: dict[str, Any], receipt: dict[str, Any]) -> str:
    """The scripted "model" that drafts the reply; each call reads the next script line."""
    line: str = _next_script_line("reply", REPLIES)
    amount = f"${receipt['cents'] / 100:.2f}"
    return line.format(name=customer["name"].split()[0], amount=amount, charge=receipt["charge_id"])


# --- the agent -----------------------------------------------------------------------------

PLAN = ["look up customer", "decide", "charge", "confirm payment", "reply"]


@engine.agent
def support_ticket(run: Any, ticket: dict[str, Any]) -> dict[str, Any]:
    """Upgrade the customer the ticket names, charge them once, and draft the reply."""
    run.plan(PLAN)
    with run.step("look up customer"):
        customer = lookup_customer(ticket["customer"])
    run.checkpoint("customer-loaded")
    with run.step("decide"):
        decision = run.decide("triage", triage_model, ticket, customer)
    with run.step("charge"):
        receipt = charge_card(ticket["order"], decision["cents"])
    with run.step("confirm payment"):
        status = payment_status(receipt["charge_id"])
    run.checkpoint("paid")
    with run.step("reply"):
        reply = run.decide("reply", reply_model, customer, receipt)
    return {
        "ticket": ticket["id"],
        "charge": receipt["charge_id"],
        "payment": status["status"],
        "reply": reply,
    }


def new_ticket() -> dict[str, Any]:
    tag = secrets.token_hex(3)
    return {"id": f"T-{tag}", "customer": "c-42", "order": f"o-{tag}", "text": "upgrade me to Pro"}


def child(url: str, run_id: str, ticket_json: str) -> None:
    """The demo's child process: run the ticket (the tour arms a failpoint to kill it)."""
    Engine.open(url).run(support_ticket, run_id=run_id, ticket=json.loads(ticket_json))
