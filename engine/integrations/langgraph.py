"""LangGraph checkpoints on agentlog's log (``pip install 'agentlog[langgraph]'``).

``builder.compile(checkpointer=AgentlogSaver(engine))``: every LangGraph thread is a run
of the engine's store (``agentlog runs``, ``show`` and ``timeline`` see it as the agent
``langgraph:<name>``), and its checkpoints, pending writes and deletions are events of the
run's stream, sealed like any other when the store is. Channel values are encoded by
LangGraph's own serializer in its safe mode (no pickle fallback, msgpack limited to its
safe types and the allow-list LangGraph derives from the graph's state) and carried as
bytes. Storage is linear: a channel value is stored only at the version that changed it,
and a list that extends the value this saver last stored (a message history) is stored
as that version plus the appended tail.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ..errors import UsageError
from ..events import (
    Event,
    GraphCheckpointed,
    GraphForgotten,
    GraphKept,
    GraphValue,
    GraphWrite,
    GraphWritten,
    now,
)
from ._lg_async import AsyncMethods
from ._lg_delta import delta_history
from ._lg_log import AGENT, Threads, thread_run_id
from ._lg_node import durable_node, node_run_id
from ._lg_snap import take
from ._lg_thread import Thread, extends, resolves, value_chain

if TYPE_CHECKING:
    from ..runtime.engine import Engine

# id of a stored part -> (the list it ends, its length): the values one list() rebuilt.
Memo = dict[int, tuple[list[Any], int]]

__all__ = [
    "AgentlogSaver",
    "AsyncAgentlogSaver",
    "durable_node",
    "node_run_id",
    "safe_serde",
    "thread_run_id",
]


def safe_serde() -> JsonPlusSerializer:
    """LangGraph's serializer in its safe mode: no pickle fallback, strict msgpack (its
    safe types; a compiled graph adds its state's types through ``with_allowlist``)."""
    return JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)


class AgentlogSaver(AsyncMethods, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose storage is ``engine``'s log (memory, SQLite or
    PostgreSQL). ``name`` makes the threads' agent ``langgraph:<name>``. Sync and async
    methods both work; the async ones run the store's I/O in a worker thread."""

    def __init__(
        self, engine: Engine, *, name: str = "graph", serde: SerializerProtocol | None = None
    ) -> None:
        super().__init__(serde=serde or safe_serde())
        if not name:
            raise UsageError("AgentlogSaver needs a name (its threads' agent langgraph:<name>)")
        self.engine = engine
        snapshot = functools.partial(take, versions=self._versions, merge=self._merge)
        self.threads = Threads(lambda: engine.store, AGENT + name, snapshot)

    # --- reading ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the newest of its
        thread and namespace), with its pending writes; None if there is none."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        with self.threads.lock:
            thread = self.threads.read(thread_id)
            for _ in range(2):  # a partial thread (a snapshot and its tail), else all
                cid = get_checkpoint_id(config) or thread.latest(ns)
                saved = thread.checkpoints.get(ns, {}).get(cid) if cid else None
                if not thread.partial or (
                    saved is not None and resolves(thread, ns, self._versions(saved))
                ):
                    break
                thread = self.threads.read(thread_id, full=True)
            return None if saved is None else self._tuple(thread, thread_id, saved)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints of ``config``'s thread (every thread if None), newest first,
        limited to its namespace and checkpoint id when given, to those older than
        ``before``, to those whose metadata has ``filter``'s items, at most ``limit``."""
        conf = config["configurable"] if config else {}
        ids = [conf["thread_id"]] if "thread_id" in conf else list(self.threads.thread_ids())
        ns_only, cid_only = (
            conf.get("checkpoint_ns"),
            get_checkpoint_id(config or {"configurable": {}}),
        )
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in ids:
            with self.threads.lock:
                thread = self.threads.read(thread_id, full=True)
                found = [
                    c
                    for ns, saved in thread.checkpoints.items()
                    if ns_only is None or ns == ns_only
                    for cid, c in saved.items()
                    if (not cid_only or cid == cid_only) and (not before_id or cid < before_id)
                ]
            found.sort(key=lambda c: c.checkpoint_id, reverse=True)
            memo: Memo = {}
            for c in found:
                if left is not None and left <= 0:
                    return
                if filter and not _matches(self._metadata(c), filter):
                    continue
                if left is not None:
                    left -= 1
                with self.threads.lock:
                    tup = self._tuple(thread, thread_id, c, memo)
                yield tup

    def _tuple(
        self, thread: Thread, thread_id: str, c: GraphCheckpointed, memo: Memo | None = None
    ) -> CheckpointTuple:
        checkpoint: Checkpoint = self.serde.loads_typed((c.kind, c.checkpoint))
        values = {}
        for channel, version in checkpoint["channel_versions"].items():
            chain = value_chain(thread, c.ns, channel, version)
            if chain:
                values[channel] = self._value(chain, memo)
        writes = [
            (task, channel, self.serde.loads_typed((kind, data)))
            for task, channel, kind, data, _ in thread.ordered_writes(c.ns, c.checkpoint_id)
        ]
        return CheckpointTuple(
            config=_config(thread_id, c.ns, c.checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self._metadata(c),
            parent_config=_config(thread_id, c.ns, c.parent_id) if c.parent_id else None,
            pending_writes=writes,
        )

    def _value(self, chain: Sequence[GraphValue], memo: Memo | None = None) -> Any:
        """The value a chain of stored parts makes (a whole value, then its tails). A
        ``memo`` shared by the tuples of one ``list`` keeps each part's list and length:
        an older version of the history is then a slice of a newer one, not decoded again."""
        if memo is not None and id(chain[-1]) in memo:
            whole, n = memo[id(chain[-1])]
            return whole[:n]
        value = self.serde.loads_typed((chain[0].kind, chain[0].data))
        if len(chain) == 1:
            return value
        whole = list(value)
        for part in chain:
            if part is not chain[0]:
                whole.extend(self.serde.loads_typed((part.kind, part.data)))
            if memo is not None:
                memo[id(part)] = (whole, len(whole))
        return whole[:] if memo is not None else whole

    def _versions(self, c: GraphCheckpointed) -> dict[str, Any]:
        versions: dict[str, Any] = self.serde.loads_typed((c.kind, c.checkpoint))[
            "channel_versions"
        ]
        return versions

    def _merge(self, chain: Sequence[GraphValue]) -> GraphValue:
        """A chain of stored parts as one whole value (what a snapshot keeps)."""
        kind, data = self.serde.dumps_typed(self._value(chain))
        return GraphValue(
            channel=chain[-1].channel, version=chain[-1].version, kind=kind, data=data
        )

    def _metadata(self, c: GraphCheckpointed) -> CheckpointMetadata:
        meta: CheckpointMetadata = self.serde.loads_typed((c.metadata_kind, c.metadata))
        return meta

    # --- writing ------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (its values new at ``new_versions`` only) as one event."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        kind, data = self.serde.dumps_typed(bare)
        meta = get_checkpoint_metadata(config, metadata)
        meta_kind, meta_data = self.serde.dumps_typed(meta)
        values: dict[str, Any] = checkpoint["channel_values"]

        def make(thread: Thread) -> list[Event]:
            stored = [
                self._stored(thread, ns, ch, version, values, ch in values)
                for ch, version in new_versions.items()
            ]
            run, step, source = meta.get("run_id"), meta.get("step"), meta.get("source")
            return [
                GraphCheckpointed(
                    at=now(),
                    ns=ns,
                    checkpoint_id=checkpoint["id"],
                    kind=kind,
                    checkpoint=data,
                    metadata_kind=meta_kind,
                    metadata=meta_data,
                    parent_id=conf.get("checkpoint_id"),
                    values=stored,
                    run=run if isinstance(run, str) else None,
                    step=step if isinstance(step, int) else None,
                    source=source if isinstance(source, str) else None,
                )
            ]

        self.threads.append(thread_id, make)
        return _config(thread_id, ns, checkpoint["id"])

    def _stored(
        self, thread: Thread, ns: str, ch: str, version: Any, values: dict[str, Any], has: bool
    ) -> GraphValue:
        """Channel ``ch``'s value at ``version``: "empty", its tail past the list this
        saver stored last for the channel (if that one is still stored), or whole."""
        if not has:
            return GraphValue(channel=ch, version=version, kind="empty")
        value = values[ch]
        last = thread.lists.get((ns, ch))
        if type(value) is list:
            thread.lists[(ns, ch)] = (version, list(value))
        if last is not None and (ns, ch, last[0]) in thread.values and extends(last[1], value):
            kind, data = self.serde.dumps_typed(value[len(last[1]) :])
            return GraphValue(channel=ch, version=version, kind=kind, data=data, base=last[0])
        kind, data = self.serde.dumps_typed(value)
        return GraphValue(channel=ch, version=version, kind=kind, data=data)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store task ``task_id``'s pending writes on the checkpoint ``config`` names."""
        conf = config["configurable"]
        thread_id, ns, cid = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        encoded = [
            GraphWrite(channel=c, idx=WRITES_IDX_MAP.get(c, i), kind=k, data=d)
            for i, (c, v) in enumerate(writes)
            for k, d in [self.serde.dumps_typed(v)]
        ]
        if not encoded:
            return
        event = GraphWritten(
            at=now(), ns=ns, checkpoint_id=cid, task_id=task_id, writes=encoded, task_path=task_path
        )
        self.threads.append(thread_id, lambda thread: [event])

    def delete_thread(self, thread_id: str) -> None:
        """Forget every checkpoint and write of the thread (its run keeps the history)."""
        self._forget(thread_id, lambda thread: GraphForgotten(at=now()))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget the checkpoints (and their writes) that LangGraph runs ``run_ids`` wrote."""
        runs = [r for r in run_ids if isinstance(r, str)]
        if not runs:
            return
        for thread_id in list(self.threads.thread_ids()):
            self._forget(
                thread_id,
                lambda thread: (
                    GraphForgotten(at=now(), runs=runs)
                    if any(
                        c.run in runs
                        for saved in thread.checkpoints.values()
                        for c in saved.values()
                    )
                    else None
                ),
            )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's newest checkpoint (its values and
        writes stay readable); ``delete``: forget the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            self._forget(thread_id, _keep_latest)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Give ``target_thread_id`` the source's checkpoints and writes, as they stand."""
        source = self.threads.read(source_thread_id, full=True)
        events = list(source.live)
        if events:
            self.threads.append(target_thread_id, lambda thread: events)

    def _forget(self, thread_id: str, make: Any) -> None:
        def events(thread: Thread) -> list[Event]:
            if not thread.checkpoints and not thread.writes:
                return []
            e = make(thread)
            return [] if e is None else [e]

        with self.threads.lock:
            if self.threads.read(thread_id, full=True).position:
                self.threads.append(thread_id, events)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The version after ``current``: its number plus one and a random suffix, so two
        branches of one thread (a fork, a replay) never give one version two values."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """LangGraph's DeltaChannel history: the parent chain walked once (_lg_delta)."""
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        with self.threads.lock:
            thread = self.threads.read(thread_id, full=True)
            return delta_history(  # type: ignore[return-value]
                thread,
                ns,
                get_checkpoint_id(config),
                channels,
                self.serde.loads_typed,
                lambda ch, v: self._value(value_chain(thread, ns, ch, v)),
            )


# The async saver is the same object: LangGraph calls the a-methods from its async graphs.
AsyncAgentlogSaver = AgentlogSaver


def _keep_latest(thread: Thread) -> GraphForgotten | None:
    keep = [
        GraphKept(ns=ns, checkpoint_id=max(saved))
        for ns, saved in thread.checkpoints.items()
        if saved
    ]
    if sum(len(saved) for saved in thread.checkpoints.values()) == len(keep):
        return None
    return GraphForgotten(at=now(), pruned=True, keep=keep)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _matches(metadata: CheckpointMetadata, filter: dict[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in filter.items())
