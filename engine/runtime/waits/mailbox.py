"""Durable messages between runs: ``run.send`` and ``run.recv``.

A run's inbox is a stream of its own, ``inbox:<run id>``, of ``message_posted`` events.
A send is call N of the sender: its ``message_sent`` and the ``message_posted`` in the
recipient's inbox commit together (an optimistic position in the inbox, taken again
when another sender got there first), so a replayed sender, finding its
``message_sent``, sends nothing: a message is posted once. Its id is
``<sender>:<call>``.

A receive is call N of the receiver: it consumes the first message on its topic that
the run has not consumed, recording ``message_received`` (with the message's id and
value) in the run's own stream. That one event is the consumption: a crash before it
leaves the message for the re-execution, a crash after it replays its value, and the
run's stream takes one writer at a time, so a message is received once. A timeout is
durable: ``timer_set`` records the deadline first, and when it passes
``message_received`` without a message records the ``None`` the call returns. Waiting
follows the timers' rule (``runtime.timers``): inline up to ``inline_wait``, then the
run suspends until a message on its topic is posted or the deadline passes.

Forks: a fork rewound with ``effects="reuse"`` that sends what its parent sent after the
fork position takes the parent's message over (``message_sent`` with ``parent_call`` and
the parent's message id; nothing is posted). A fork's receives first take, in order, the
messages its parent consumed after the fork position, then its own inbox.

Failpoints: ``after_send`` (a message committed), ``after_recv`` (a receive committed).
"""

from __future__ import annotations

import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

from ... import events as ev
from ... import failpoints
from ...errors import ConcurrencyError, CorruptData, RunNotFound, UsageError
from ...kinds import FINAL, Purpose, WaitReason
from ...log.effects import SEND
from ...log.history import check_run_id, iter_run, rebuild
from ...log.state import ForkOf
from ...log.waiting import Message
from ...polling import poll_until, poll_until_async
from ...secrets import redact
from ...store import Append, stream_id
from ..call import dryrun, forks
from ..defs.definitions import args_hash, normalize
from . import timers

if TYPE_CHECKING:
    from ...log.state import RunState
    from ...store import Store
    from ..run.context import RunContext

POLL = 0.5  # the longest pause between two looks at the inbox while waiting inline
TOPIC_LIMIT = 200


def inbox_stream(run_id: str) -> uuid.UUID:
    """The stream of the inbox of ``run_id``."""
    return stream_id("inbox:" + check_run_id(run_id))


def posted(store: Store, run_id: str, after: int = 0) -> list[tuple[int, ev.MessagePosted]]:
    """The messages in the inbox of ``run_id`` after position ``after``, with their
    positions; anything else there is a damaged inbox (CorruptData)."""
    found = []
    for r in store.read(inbox_stream(run_id), after=after):
        if not isinstance(r.event, ev.MessagePosted):
            tag = r.event.__struct_config__.tag
            raise CorruptData(
                f"the inbox of run {run_id} is damaged at position {r.position}: "
                f"{tag} is not a message"
            )
        found.append((r.position, r.event))
    return found


def check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not 0 < len(topic) <= TOPIC_LIMIT or not topic.isprintable():
        shown = repr(topic)[:40]
        raise UsageError(f"a message topic is 1 to {TOPIC_LIMIT} printable characters: {shown}")
    return topic


# --- send ---------------------------------------------------------------------------------


def send(ctx: RunContext, to: str, topic: str, value: Any) -> None:
    """``run.send``: post ``value`` on ``topic`` to the run ``to``, once (see above)."""
    check_topic(topic)
    to = check_run_id(to, "recipient run id")
    data = normalize(value, f"message {topic!r}")
    call = ctx.next_call()
    ahash = args_hash("send", [to, topic, data], ctx.hash_key)
    shown = redact(data, seen=ctx.seen)  # secret-named entries never reach the inbox
    if ctx.recorded(call, "send", topic, ahash) is not None:
        return  # sent before: the message is in the inbox already
    ctx.live(call, f"send {topic!r} to {to}")
    if ctx.writer.state.dry_run:  # a dry run posts nothing: what it would post, recorded
        return dryrun.would_post(ctx, call, {"to": to, "topic": topic, "value": shown}, ahash)
    inherited = forks.inheritance(ctx).take(SEND, ahash)
    if inherited is not None:  # a fork sending what its parent sent after the fork position
        parent = inherited[1]
        assert parent.key is not None
        taken = ev.MessageSent(
            at=ctx.config.wall(),
            call=call,
            to_run_id=to,
            topic=topic,
            message_id=parent.key,
            args_hash=ahash,
            parent_call=parent.call,
        )
        ctx.record(taken)
        failpoints.hit("after_send")
        ctx.log.info("message_reused", call=call, to=to, topic=topic, id=parent.key)
        return
    _check_recipient(ctx.store, to)
    # Posted at the sender's wall clock: a receive's deadline is compared with it.
    mid, at = f"{ctx.run_id}:{call}", ctx.config.wall()
    sent = ev.MessageSent(
        at=at, call=call, to_run_id=to, topic=topic, message_id=mid, args_hash=ahash
    )
    post = ev.MessagePosted(at=at, message_id=mid, from_run_id=ctx.run_id, topic=topic, value=shown)
    _post(ctx, to, sent, post)
    failpoints.hit("after_send")
    ctx.log.info("message_sent", call=call, to=to, topic=topic)
    ctx.host.signals.notify()  # a receive waiting inline in this process looks again
    ctx.host.wake(to)  # a recipient suspended on this topic goes on


def post(store: Store, to: str, topic: str, value: Any, at: float) -> str:
    """``engine.send``: post ``value`` on ``topic`` to the run ``to`` from outside any run
    (a webhook, a script), at ``at`` (the sender's wall clock); the message's id. Each
    call posts one message: a sender that must not post twice sends from a run."""
    check_topic(topic)
    to = check_run_id(to, "recipient run id")
    data = normalize(value, f"message {topic!r}")
    _check_recipient(store, to)
    mid = f"outside:{uuid.uuid4().hex}"
    shown = redact(data)  # secret-named entries never reach the inbox
    message = ev.MessagePosted(at=at, message_id=mid, from_run_id="", topic=topic, value=shown)
    inbox = inbox_stream(to)
    while True:  # the inbox's next position, taken again if a sender got there first
        last = store.last_position(inbox)
        try:
            store.append([Append(inbox, last + 1, message)])
            return mid
        except ConcurrencyError:
            continue


def _check_recipient(store: Store, to: str) -> None:
    state = rebuild(store, to)
    if state.position == 0:
        raise RunNotFound(f"no run {to}: a message needs a recipient run that exists")
    if state.status in FINAL:
        raise UsageError(f"run {to} has {state.status}: it receives no more messages")


def _post(ctx: RunContext, to: str, sent: ev.MessageSent, post: ev.MessagePosted) -> None:
    """Commit ``sent`` in the sender with ``post`` in the inbox of ``to``: one commit, at
    the inbox's next position, taken again if another sender took it first."""
    inbox = inbox_stream(to)
    while True:
        last = ctx.store.last_position(inbox)
        try:
            ctx.record(sent, extra=[Append(inbox, last + 1, post)])
            return
        except ConcurrencyError:
            if ctx.store.last_position(inbox) == last:
                raise  # the sender's own stream conflicted: another process runs it


# --- receive --------------------------------------------------------------------------------


class Inbox:
    """One execution's view of its run's inbox: the messages read so far (each read
    once) and the ids the run consumed (the log's, then this execution's)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.lock = threading.RLock()
        self.read_to = 0
        self.messages: list[ev.MessagePosted] = _parent_consumed(ctx)
        calls = ctx.journal.calls.values()
        self.consumed = {c.ref for c in calls if c.kind == "recv" and c.ref is not None}

    def first(self, topic: str, until: float | None = None) -> ev.MessagePosted | None:
        """The first message on ``topic`` not consumed yet (the inbox read anew), posted
        by ``until`` if given (one posted after a receive's deadline is not its)."""
        with self.lock:
            for position, message in posted(self.ctx.store, self.ctx.run_id, self.read_to):
                self.messages.append(message)
                self.read_to = position
            return next(
                (
                    m
                    for m in self.messages
                    if m.topic == topic
                    and m.message_id not in self.consumed
                    and (until is None or m.at <= until)
                ),
                None,
            )

    def take(self, call: int, topic: str, until: float | None = None) -> tuple[bool, Any]:
        """Consume the first message on ``topic`` (posted by ``until``, if given) as
        receive ``call``: ``(True, value)``, or ``(False, None)`` when there is none."""
        with self.lock:
            message = self.first(topic, until)
            if message is None:
                return False, None
            self.ctx.record(
                ev.MessageReceived(
                    at=self.ctx.config.wall(),
                    call=call,
                    topic=topic,
                    message_id=message.message_id,
                    value=message.value,
                )
            )
            self.consumed.add(message.message_id)
        failpoints.hit("after_recv")
        self.ctx.log.info("message_received", call=call, topic=topic, id=message.message_id)
        return True, message.value


def _parent_consumed(ctx: RunContext) -> list[ev.MessagePosted]:
    """For a fork, the messages its parent consumed after the fork position, in the
    parent's order: the fork receives them again (each once, recorded in its own log)
    before anything in its own inbox. Nothing for a run that is not a fork."""
    fork = ctx.writer.state.lineage
    if not isinstance(fork, ForkOf):
        return []
    return [
        ev.MessagePosted(
            at=e.at,
            message_id=e.message_id,
            from_run_id=e.message_id.rpartition(":")[0],
            topic=e.topic,
            value=e.value,
        )
        for r in iter_run(ctx.store, fork.parent_run_id)
        if r.position > fork.fork_position
        and isinstance(e := r.event, ev.MessageReceived)
        and e.message_id is not None
    ]


_inboxes: weakref.WeakKeyDictionary[RunContext, Inbox] = weakref.WeakKeyDictionary()
_inboxes_lock = threading.Lock()


def inbox_of(ctx: RunContext) -> Inbox:
    """The inbox view of the execution ``ctx`` (made on its first receive)."""
    with _inboxes_lock:
        box = _inboxes.get(ctx)
        if box is None:
            box = _inboxes[ctx] = Inbox(ctx)
        return box


def recv(ctx: RunContext, topic: str, timeout: float | None) -> Any:
    """``run.recv``: the next message on ``topic``, consumed once; None when ``timeout``
    seconds pass first (see above). An awaitable in an async agent."""
    check_topic(topic)
    wait = None if timeout is None else timers.check_seconds(timeout, "run.recv timeout")
    call = ctx.next_call()
    entry = ctx.recorded(call, "recv", topic)
    if entry is not None and isinstance(entry.outcome, ev.MessageReceived):
        return _ready(ctx, entry.outcome.value)
    ctx.live(call, f"recv {topic!r}")
    box = inbox_of(ctx)
    # A resumed receive has its deadline recorded: a message posted after it is not its.
    got, value = box.take(call, topic, entry.until if entry is not None else None)
    if got:
        return _ready(ctx, value)
    until = None
    if wait is not None or (entry is not None and entry.until is not None):
        until = timers.deadline(ctx, call, entry, wait or 0.0, Purpose.RECV, topic)
    # The deadline is the engine's wall clock; the inline wait before it, this process's.
    inline = ctx.config.inline_wait
    seconds = inline if until is None else min(inline, until - ctx.config.wall())
    if timers.in_loop(ctx):
        return _recv_async(box, call, topic, until, time.monotonic() + seconds)
    if seconds > 0:
        poll_until(lambda: box.first(topic), seconds, most=POLL, news=ctx.host.signals)
    return _waited(box, call, topic, until)


async def _recv_async(box: Inbox, call: int, topic: str, until: float | None, end: float) -> Any:
    """The inline wait of a receive in an async agent: on its loop, not blocking it."""
    if (seconds := end - time.monotonic()) > 0:
        await poll_until_async(lambda: box.first(topic), seconds, most=POLL)
    return _waited(box, call, topic, until)


def _waited(box: Inbox, call: int, topic: str, until: float | None) -> Any:
    """The inline wait of receive ``call`` is over: the message that came (by the
    deadline: one posted after it is left for a later receive, however late this one
    wakes), else None once the deadline passed, else the run suspends until one of them
    is due."""
    got, value = box.take(call, topic, until)
    if got:
        return value
    ctx = box.ctx
    if until is not None and ctx.config.wall() >= until:
        ctx.record(ev.MessageReceived(at=ctx.config.wall(), call=call, topic=topic))
        ctx.log.info("message_timed_out", call=call, topic=topic)
        return None
    timers.suspend(ctx, call, WaitReason.MESSAGE, until, topic)


def _ready(ctx: RunContext, value: Any) -> Any:
    return timers.Ready(value) if timers.in_loop(ctx) else value


def message_due(store: Store, state: RunState) -> bool:
    """Whether a message the waiting run ``state`` waits for is in its inbox."""
    on = state.waits_on
    if not isinstance(on, Message):
        return False
    waiting = [m.message_id for _, m in posted(store, state.run_id) if m.topic == on.topic]
    if not waiting:
        return False
    consumed = {
        r.event.message_id
        for r in iter_run(store, state.run_id)
        if isinstance(r.event, ev.MessageReceived)
    }
    return any(m not in consumed for m in waiting)
