"""The actions, each a POST carrying the CSRF value: answer a paused run (text, or JSON
with ``as_json``), resume, approve a held run, abandon, and rewind to a fork at a
position or checkpoint with ``effects=``. A form posted by the page's script gets JSON
back; a plain form, a redirect to the run's page (the fork's, for a rewind)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from engine.errors import RunNotFound, UsageError
from engine.kinds import Effects

from ..jsonvalue import json_value, shown
from ..output import result_doc
from . import params
from .guard import CSRF_FIELD, csrf_ok, same_origin
from .render import error

if TYPE_CHECKING:
    from starlette.requests import Request

    from engine import Engine, RunResult

ASYNC_HEADER = "x-agentlog-fetch"
EFFECTS = tuple(e.value for e in Effects)


def _answer(engine: Engine, rid: str, form: dict[str, str]) -> RunResult:
    from engine import Given

    value = form.get("value", "")
    if len(value) > 100_000:
        raise UsageError("the answer is longer than 100,000 characters")
    if form.get("as_json") != "1":
        return engine.answer(rid, value)
    parsed = json_value(value, "the answer")  # as `agentlog answer --json-value` reads it
    return engine.answer(rid, Given(parsed))


def _rewind(engine: Engine, rid: str, form: dict[str, str]) -> RunResult:
    to = params.position(form.get("to"), "to")
    if to is None:
        raise UsageError("to: give a position or a checkpoint name to fork from")
    effects = form.get("effects") or Effects.REUSE.value
    if effects not in EFFECTS:
        raise UsageError(f"effects must be one of {', '.join(EFFECTS)}")
    return engine.rewind(rid, to, effects=effects)


def _act(engine: Engine, action: str, run_id: str, form: dict[str, str]) -> RunResult:
    rid = engine.resolve(run_id)
    match action:
        case "answer":
            return _answer(engine, rid, form)
        case "resume":
            return engine.resume(rid)
        case "approve":
            return engine.approve(rid)
        case "abandon":
            return engine.abandon(rid)
        case "rewind":
            return _rewind(engine, rid, form)
    raise UsageError(f"no action {shown(action)}")


def _json(doc: dict[str, Any], status: int = 200) -> Response:
    """``doc`` as JSON (a value the codec holds but JSON lacks, as its text)."""
    return Response(msgspec.json.encode(doc, enc_hook=str), status, media_type="application/json")


ACTIONS = ("answer", "resume", "approve", "abandon", "rewind")


async def act(request: Request) -> Response:
    """``POST /runs/{run_id}/{action}``: the action, refused (403) without the CSRF value;
    a refusal by the engine is a 400 with its one line."""
    form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    fetched = request.headers.get(ASYNC_HEADER) == "1"
    if not csrf_ok(request, form.get(CSRF_FIELD)) or not same_origin(request):
        message = "this form's CSRF token is missing or stale: reload the page"
        if fetched:
            return _json({"error": message}, 403)
        return error(request, 403, message)
    engine: Engine = request.app.state.engine
    action, run_id = request.path_params["action"], request.path_params["run_id"]
    if action not in ACTIONS:
        return error(request, 404, f"no action {shown(action)}")
    try:
        result = await run_in_threadpool(_act, engine, action, run_id, form)
    except UsageError as e:
        if not fetched:
            raise
        return _json({"error": str(e)}, 404 if isinstance(e, RunNotFound) else 400)
    root = request.scope.get("root_path", "")
    where = f"{root}/runs/{result.run_id}"
    if fetched:
        return _json({**result_doc(result), "location": where})
    return RedirectResponse(where, 303)
