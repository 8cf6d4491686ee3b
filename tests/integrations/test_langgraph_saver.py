"""AgentlogSaver beyond the conformance suite: a thread is a run the CLI lists; storage
is linear (an unchanged channel is not stored again, a growing list is stored as its
appended tails) and a saver of another engine on the same store rebuilds the full state;
LangGraph's serializer runs in its safe mode (no pickle)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from conftest import all_backends, backends
from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph
from test_store_cipher import KEY, MARK, table_bytes

from engine import Engine
from engine.events import GraphCheckpointed
from engine.integrations.langgraph import AgentlogSaver, thread_run_id
from engine.log.history import read_events
from engine.store.cipher import CIPHER_ENV
from replay.cli.entry import run_cli

STEPS = 60
ITEM = "x" * 100  # each step appends ~100 bytes to the history


class Chat(TypedDict):
    history: Annotated[list[str], operator.add]
    title: str
    n: int


def _graph(saver: AgentlogSaver) -> Any:
    def turn(state: Chat) -> dict[str, Any]:
        return {"history": [f"{state['n']}:{ITEM}"], "n": state["n"] + 1}

    builder = StateGraph(Chat)
    builder.add_node("turn", turn)
    builder.add_edge(START, "turn")
    builder.add_conditional_edges("turn", lambda s: END if s["n"] >= STEPS else "turn")
    return builder.compile(checkpointer=saver)


def _stored(eng: Engine, thread: str, channel: str) -> list[int]:
    """The bytes stored for ``channel`` at each checkpoint that stored it."""
    return [
        len(v.data)
        for r in read_events(eng.store, thread_run_id(thread))
        if isinstance(r.event, GraphCheckpointed)
        for v in r.event.values
        if v.channel == channel
    ]


@all_backends
def test_a_growing_history_is_stored_as_its_tails_and_read_back_whole(
    store_url: str, eng: Engine
) -> None:
    """60 steps each appending 100 bytes: every stored history after the first is one
    tail of about 100 bytes (linear, not the whole list again), the title, never
    changed, is stored once, and a saver of another engine reads the whole history, and
    at every checkpoint of its history the history as it was then."""
    config: Any = {"configurable": {"thread_id": "chat-1"}, "recursion_limit": 500}
    _graph(AgentlogSaver(eng)).invoke({"history": [], "title": "t", "n": 0}, config)
    sizes = _stored(eng, "chat-1", "history")
    assert len(sizes) == STEPS + 1  # the input's empty list, then one per step
    assert max(sizes[1:]) < 2 * len(ITEM), sizes
    assert len(_stored(eng, "chat-1", "title")) == 1
    other = eng if store_url == "memory://" else Engine.open(store_url)
    try:
        again = _graph(AgentlogSaver(other))
        state = again.get_state(config).values
        for past in again.get_state_history(config):  # each checkpoint's own history
            n = past.values.get("n", 0)
            assert past.values.get("history", []) == [f"{i}:{ITEM}" for i in range(n)]
    finally:
        if other is not eng:
            other.close()
    assert state["n"] == STEPS
    assert state["history"] == [f"{i}:{ITEM}" for i in range(STEPS)]


@all_backends
def test_a_thread_is_a_run_of_its_graph(
    store_url: str, eng: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    """The thread is the run lg:<thread> of the agent langgraph:<name>, in `agentlog runs`."""
    config: Any = {"configurable": {"thread_id": "t-7"}}
    _graph(AgentlogSaver(eng, name="support")).invoke({"history": [], "title": "", "n": 58}, config)
    rows = {r.run_id: r for r in eng.store.runs()}
    assert rows["lg:t-7"].agent == "langgraph:support"
    assert rows["lg:t-7"].position == len(read_events(eng.store, "lg:t-7"))
    if store_url != "memory://":
        capsys.readouterr()
        assert run_cli(["runs", "--url", store_url]) == 0
        assert "lg:t-7" in capsys.readouterr().out
    assert eng.recover() == []  # nothing here executes a thread: recover leaves it alone


def test_a_thread_id_that_is_no_run_id_gets_a_digest() -> None:
    """Any thread id maps to a valid, stable run id."""
    assert thread_run_id("a b/c") == thread_run_id("a b/c")
    assert thread_run_id("a b/c").startswith("lg-")
    assert thread_run_id("x" * 300) != thread_run_id("x" * 301)


def test_the_serializer_never_pickles(eng: Engine) -> None:
    """No pickle fallback: a value only pickle could encode is refused, not pickled."""
    saver = AgentlogSaver(eng)
    assert saver.serde.pickle_fallback is False  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        saver.serde.dumps_typed(lambda: None)


@all_backends
def test_a_tasks_regular_write_is_kept_once_and_a_special_one_replaced(eng: Engine) -> None:
    """As LangGraph's savers do: the first regular write of (task, index) stays; an
    interrupt written again replaces the earlier one."""
    saver = AgentlogSaver(eng)
    config: Any = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
    checkpoint: Any = {
        "v": 1, "id": "1", "ts": "", "channel_values": {}, "channel_versions": {},
        "versions_seen": {}, "pending_sends": [], "updated_channels": None,
    }  # fmt: skip
    stored = saver.put(config, checkpoint, {"source": "loop", "step": 0}, {})
    saver.put_writes(stored, [("a", 1), ("__interrupt__", "first")], "task")
    saver.put_writes(stored, [("a", 2), ("__interrupt__", "again")], "task")
    tup = saver.get_tuple(stored)
    assert tup is not None
    assert sorted((c, v) for _, c, v in tup.pending_writes or []) == [
        ("__interrupt__", "again"),
        ("a", 1),
    ]


def _delta_add(state: list[str], writes: Any) -> list[str]:
    return [*state, *(item for w in writes for item in w)]


class DeltaChat(TypedDict):
    history: Annotated[list[str], DeltaChannel(_delta_add, snapshot_frequency=50)]
    n: int


@all_backends
def test_langgraphs_delta_channel_rebuilds_its_history_from_our_log(
    store_url: str, eng: Engine
) -> None:
    """A DeltaChannel history past two of its snapshots: a saver of another engine
    rebuilds it (ancestor writes plus the nearest snapshot) and walks its history."""

    def turn(state: DeltaChat) -> dict[str, Any]:
        return {"history": [str(state["n"])], "n": state["n"] + 1}

    def graph(saver: AgentlogSaver) -> Any:
        builder = StateGraph(DeltaChat)
        builder.add_node("turn", turn)
        builder.add_edge(START, "turn")
        builder.add_conditional_edges("turn", lambda s: END if s["n"] >= 120 else "turn")
        return builder.compile(checkpointer=saver)

    config: Any = {"configurable": {"thread_id": "delta"}, "recursion_limit": 500}
    graph(AgentlogSaver(eng)).invoke({"history": [], "n": 0}, config)
    other = eng if store_url == "memory://" else Engine.open(store_url)
    try:
        again = graph(AgentlogSaver(other))
        assert again.get_state(config).values["history"] == [str(i) for i in range(120)]
        assert len(list(again.get_state_history(config))) == 122
    finally:
        if other is not eng:
            other.close()


@backends("sqlite", "postgres")
@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "clear"])
def test_a_sealed_store_seals_a_threads_checkpoints(
    store_url: str, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With AGENTLOG_CIPHER_KEY a channel value is in no raw byte of the events table
    (in clear it is), and the thread reads back the same."""
    if encrypted:
        monkeypatch.setenv(CIPHER_ENV, KEY)
    eng = Engine.open(store_url)
    try:
        config: Any = {"configurable": {"thread_id": "sealed"}}
        out = _graph(AgentlogSaver(eng)).invoke({"history": [MARK], "title": MARK, "n": 59}, config)
        assert out["title"] == MARK and out["history"][0] == MARK
        raw = table_bytes(store_url, eng.store, "events")
        assert (MARK.encode() in raw) is not encrypted
    finally:
        eng.close()


def test_a_durable_node_that_waits_for_a_person_says_on_what(eng: Engine) -> None:
    """A node whose side effect's outcome is unknown pauses its run: the error LangGraph
    raises names the question to answer, not "no reason recorded"."""
    from engine import Indeterminate
    from engine.errors import RunFailed
    from engine.integrations.langgraph import durable_node

    @eng.tool(side_effect=True)
    def post(text: str) -> str:
        raise Indeterminate("the connection dropped after the request was sent")

    class Note(TypedDict):
        text: str

    def send(state: Note) -> dict[str, Any]:
        return {"text": post(state["text"])}

    builder = StateGraph(Note)
    builder.add_node("send", durable_node(eng, send))
    builder.add_edge(START, "send")
    builder.add_edge("send", END)
    graph = builder.compile(checkpointer=AgentlogSaver(eng))
    with pytest.raises(RunFailed) as raised:
        graph.invoke({"text": "hi"}, {"configurable": {"thread_id": "n1"}})
    assert raised.value.status == "paused"
    said = str(raised.value)
    assert "waiting: Did " in said and "take effect?" in said, said
    assert "no reason recorded" not in said


def test_a_node_run_resumed_without_its_task_state_is_left_for_the_graph(eng: Engine) -> None:
    """``engine.recover()`` in the graph's own process (an app that recovers at boot)
    finds a crashed node's run and its agent, but not the LangGraph state the node
    works on: the run stays running for the graph to re-run, it is not failed."""
    from engine.integrations.langgraph import durable_node

    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    durable_node(eng, step, name="step")
    agent = eng.registry.agent("langgraph-node:step")
    assert agent is not None
    result = eng.run(agent, run_id="lg-node:" + "0" * 40)  # as recover resumes it
    assert result.status == "running", result
    assert "LangGraph" in (result.error or "")


def test_a_deleted_thread_is_one_prune_can_free(eng: Engine) -> None:
    """CONTRACT: a LangGraph thread is a run that ``prune`` sees; once the graph deleted
    the thread (delete_thread), its history is what prune frees."""
    config: Any = {"configurable": {"thread_id": "gone"}}
    saver = AgentlogSaver(eng)
    _graph(saver).invoke({"history": [], "title": "", "n": 58}, config)
    saver.delete_thread("gone")
    assert "lg:gone" in eng.prune(older_than=0, dry_run=True)["run_ids"]
