"""An engine's own tools and agents, and finding an agent again by the name a run recorded.

Each ``Engine`` owns a :class:`Registry` of the definitions its decorators made, so two
engines in one process may each define a tool ``charge``. The engine that runs an agent
(say, the CLI's) looks in its own registry, else imports the agent's module (or script)
by the path its run recorded and finds the definition there; an agent's tools are those
of the engine that defined it. Nothing here is process-wide.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Any

from ... import observe
from ...errors import UsageError
from .definitions import AgentDef, ToolDef, main_module_path


class Registry:
    """The tools and agents one engine defined, by name (the latest definition wins)."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolDef] = {}
        self._agents: dict[str, AgentDef] = {}
        self._lock = threading.Lock()

    def add_tool(self, tool: ToolDef) -> None:
        """Keep ``tool``; warn when it replaces another function under the same name."""
        with self._lock:
            before = self._tools.get(tool.name)
            self._tools[tool.name] = tool
        if before is not None and _origin(before.fn) != _origin(tool.fn):
            observe.get().warning(
                "tool_name_reused",
                tool=tool.name,
                was=_origin(before.fn),
                now=_origin(tool.fn),
                hint="pass name= to @engine.tool to keep tools apart",
            )

    def add_agent(self, agent: AgentDef) -> None:
        with self._lock:
            self._agents[agent.name] = agent

    def tool(self, name: str) -> ToolDef | None:
        with self._lock:
            return self._tools.get(name)

    def agent(self, name: str) -> AgentDef | None:
        with self._lock:
            return self._agents.get(name)

    def tools(self) -> list[ToolDef]:
        """Every tool defined, by name."""
        with self._lock:
            return [self._tools[name] for name in sorted(self._tools)]


def _origin(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def tool_for(agent: AgentDef, name: str) -> ToolDef | None:
    """The tool named ``name`` as ``agent``'s code knows it (its compensation undoes the
    calls ``agent``'s runs recorded): its engine's, else the nearest one its code reaches
    on another engine (imported by its module, or by a module its module uses); None if
    none does."""
    found = agent.registry.tool(name) if agent.registry is not None else None
    return found if found is not None else _reachable_tool(agent, name)


REACH_LIMIT = 500  # modules looked through before giving up (a large import graph)


def _reachable_tool(agent: AgentDef, name: str) -> ToolDef | None:
    """The tool named ``name`` nearest to the agent's module: held by a name of its module
    (``from m import charge``), of a module it imported (``m.charge``), or of the module
    a function it uses comes from, and so on, breadth first."""
    start: dict[str, Any] = getattr(agent.fn, "__globals__", {})
    queue, seen = [start], {id(start)}
    while queue and len(seen) <= REACH_LIMIT:
        namespace = queue.pop(0)
        for value in list(namespace.values()):
            tool = _held_tool(value, name)
            if tool is not None:
                return tool
            nxt = _namespace_of(value)
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                queue.append(nxt)
    return None


def _namespace_of(value: object) -> dict[str, Any] | None:
    """The globals of the module ``value`` is, or that the function ``value`` comes from;
    None for the standard library's and agentlog's own (no user's tool lives there)."""
    if isinstance(value, ModuleType):
        module: object = value
    else:
        module = sys.modules.get(str(getattr(value, "__module__", "") or ""))
    top = str(getattr(module, "__name__", "")).partition(".")[0]
    if not top or top in sys.stdlib_module_names or top in _OWN or top.startswith("_"):
        return None
    space = getattr(module, "__dict__", None)
    return space if isinstance(space, dict) else None


_OWN = frozenset({"engine", "replay", "projections", "builtins"})


def _held_tool(value: object, name: str) -> ToolDef | None:
    """The tool ``name`` that ``value`` is (a decorated function) or holds (an engine)."""
    try:  # any object of any module: a property or proxy may raise
        held = vars(value)
        tool = held.get("__agentlog_tool__")
        if not isinstance(tool, ToolDef):
            registry = held.get("registry")
            tool = registry.tool(name) if isinstance(registry, Registry) else None
    except Exception:
        return None
    return tool if isinstance(tool, ToolDef) and tool.name == name else None


def load_agent(name: str, import_path: str, known: Registry | None = None) -> AgentDef:
    """The agent recorded as ``name`` (``module:qualname``): the one ``known`` (the running
    engine's registry) defines, else the one its module defines, found by qualname or by
    the recorded name (``name=``) among the module's agents and its engines' registries;
    the module is imported, or its script loaded, if need be."""
    found = known.agent(name) if known is not None else None
    if found is not None:
        return found
    module_name, _, qualname = name.partition(":")
    module = _module(name, module_name, import_path)
    obj: object = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, AgentDef):
        return obj
    for value in list(vars(module).values()):
        if isinstance(value, AgentDef) and value.name == name:
            return value
        own = getattr(value, "__dict__", {}).get("registry")  # an engine of the module's
        found = own.agent(name) if isinstance(own, Registry) else None
        if found is not None:
            return found
    raise UsageError(f"{name} is not an agent (decorate it with @engine.agent)")


def _module(name: str, module_name: str, import_path: str) -> ModuleType:
    """The agent's module: this process's ``__main__`` when the run started from it (its
    code is not executed twice), else imported by name, or its script loaded."""
    main = sys.modules.get("__main__")
    if main is not None and import_path == main_module_path(main)[1]:
        return main
    if import_path.endswith(".py"):
        return _load_script(import_path)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(import_path or module_name)
    except ImportError as e:
        raise UsageError(f"cannot import agent {name}: {e}") from None


def _load_script(path: str) -> ModuleType:
    """Import a script that was run as ``__main__`` under a private name (its main
    block does not run); its agents are found there by their recorded names."""
    if not os.path.isfile(path):
        raise UsageError(f"cannot find the agent's script {path}")
    name = "__agentlog_script_" + str(abs(hash(path)))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import the agent's script {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(path))
    spec.loader.exec_module(module)
    return module
