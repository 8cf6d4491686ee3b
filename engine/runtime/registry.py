"""Process-wide registry of tool and agent definitions, and finding an agent again.

Definitions are registered by whichever ``Engine`` decorated them; the engine that runs
an agent (say, the CLI's) finds them here, importing the agent's module (or script) by
the path its run recorded when they are not loaded yet.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading

from .. import observe
from ..errors import UsageError
from .defs import AgentDef, ToolDef

_lock = threading.Lock()
TOOLS: dict[str, ToolDef] = {}
AGENTS: dict[str, AgentDef] = {}


def add_tool(tool: ToolDef) -> None:
    with _lock:
        before = TOOLS.get(tool.name)
        TOOLS[tool.name] = tool
    if before is not None and _origin(before.fn) != _origin(tool.fn):
        observe.get().warning(
            "tool_name_reused",
            tool=tool.name,
            was=_origin(before.fn),
            now=_origin(tool.fn),
            hint="pass name= to @engine.tool to keep tools apart",
        )


def _origin(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"


def tool_for(agent: AgentDef, name: str) -> ToolDef | None:
    """The tool named ``name`` that ``agent``'s calls recorded (its compensation undoes
    them), or None if it is not defined in this process."""
    return TOOLS.get(name)


def add_agent(agent: AgentDef) -> None:
    with _lock:
        AGENTS[agent.name] = agent


def load_agent(name: str, import_path: str) -> AgentDef:
    """The agent recorded as ``name`` (``module:qualname``), importing it if needed."""
    found = AGENTS.get(name)
    if found is not None:
        return found
    module_name, _, qualname = name.partition(":")
    if import_path.endswith(".py"):
        module = _load_script(import_path)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(import_path or module_name)
        except ImportError as e:
            raise UsageError(f"cannot import agent {name}: {e}") from None
    obj: object = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if isinstance(obj, AgentDef):
        return obj
    found = AGENTS.get(name)
    if found is None:
        raise UsageError(f"{name} is not an agent (decorate it with @engine.agent)")
    return found


def _load_script(path: str) -> object:
    """Import a script that was run as ``__main__`` under a private name (its main
    block does not run); the agents it defines register under their recorded names."""
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
