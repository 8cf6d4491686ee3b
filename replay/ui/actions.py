"""The actions, each a POST carrying the CSRF value: answer a paused run (text, or JSON
with ``as_json``), resume, approve a held run, abandon, rewind to a fork at a position
or checkpoint with ``effects=``, edits (``set``: NAME=JSON lines), another answer and
as a dry run, and send a message to a run. Every value is read as the CLI reads it. A
form posted by the page's script gets JSON back; a plain form, a redirect to the run's
page (the fork's, for a rewind)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse, Response

from engine.errors import RunNotFound, UsageError
from engine.kinds import Effects

from ..jsonvalue import assignments, json_value, shown
from ..output import result_doc
from . import params
from .guard import CSRF_FIELD, csrf_ok, same_origin
from .render import error

if TYPE_CHECKING:
    from starlette.requests import Request

    from engine import Engine, RunResult

ASYNC_HEADER = "x-agentlog-fetch"
EFFECTS = tuple(e.value for e in Effects)


MAX_VALUE = 100_000  # characters of a typed value: an answer, a message, the edits


def _typed(form: dict[str, str], field: str, flag: str, what: str) -> Any:
    """The form's ``field`` as text, or as JSON when ``flag`` is ``1`` (as the CLI's
    ``--json-value`` reads it)."""
    value = form.get(field, "")
    if len(value) > MAX_VALUE:
        raise UsageError(f"{what} is longer than 100,000 characters")
    return json_value(value, what) if form.get(flag) == "1" else value


def _answer(engine: Engine, rid: str, form: dict[str, str]) -> RunResult:
    from engine import Given

    value = _typed(form, "value", "as_json", "the answer")
    return engine.answer(rid, Given(value) if form.get("as_json") == "1" else value)


def _rewind(engine: Engine, rid: str, form: dict[str, str]) -> RunResult:
    """``agentlog rewind``'s options from the form: ``to``, ``effects``, ``set`` (one
    NAME=JSON a line), ``answer`` (JSON with ``answer_json``), ``dry_run``."""
    to = params.position(form.get("to"), "to")
    answer = _typed(form, "answer", "answer_json", "the answer") if form.get("answer") else None
    if to is None and answer is None:
        raise UsageError("to: give a position or a checkpoint name to fork from (or an answer)")
    effects = form.get("effects") or Effects.REUSE.value
    if effects not in EFFECTS:
        raise UsageError(f"effects must be one of {', '.join(EFFECTS)}")
    edits = form.get("set", "")
    if len(edits) > MAX_VALUE:
        raise UsageError("the edits are longer than 100,000 characters")
    lines = [x.strip() for x in edits.splitlines() if x.strip()]
    values = assignments(lines, "set")
    dry = form.get("dry_run") == "1"
    return engine.rewind(rid, to, effects=effects, set=values, answer=answer, dry_run=dry)


def _send(engine: Engine, rid: str, form: dict[str, str]) -> dict[str, Any]:
    """``agentlog send RUN TOPIC VALUE [--json-value]``: the run's state after, as a doc."""
    topic = params.text(form.get("topic"), "topic")
    if topic is None:
        raise UsageError("topic: name the topic the run receives on")
    engine.send(rid, topic, _typed(form, "value", "as_json", "the message"))
    state = engine.state(rid)
    return {"run_id": rid, "topic": topic, "sent": True, "status": state.status}


def _act(engine: Engine, action: str, run_id: str, form: dict[str, str]) -> dict[str, Any]:
    """The action's outcome as JSON's document (a run's result, or what was sent)."""
    rid = engine.resolve(run_id)
    if action == "send":
        return _send(engine, rid, form)
    return result_doc(_result(engine, action, rid, form))


def _result(engine: Engine, action: str, rid: str, form: dict[str, str]) -> RunResult:
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


ACTIONS = ("answer", "resume", "approve", "abandon", "rewind", "send")


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
        done = await run_in_threadpool(_act, engine, action, run_id, form)
    except UsageError as e:
        if not fetched:
            raise
        return _json({"error": str(e)}, 404 if isinstance(e, RunNotFound) else 400)
    root = request.scope.get("root_path", "")
    where = f"{root}/runs/{done['run_id']}"
    if fetched:
        return _json({**done, "location": where})
    return RedirectResponse(where, 303)
