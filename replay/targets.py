"""Agents named on the command line (``MODULE:AGENT``), imported with the current directory
first on ``sys.path``, as ``python -m`` does."""

import importlib
import os
import sys
from typing import Any

from engine.errors import UsageError


def cwd_first() -> str:
    """Put the current directory first on ``sys.path`` (as ``python -m`` does); it."""
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
    return cwd


def load_target(target: str) -> Any:
    """The agent named ``module:qualname``, importing the module with the cwd first."""
    from engine.runtime.defs.definitions import AgentDef

    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise UsageError(f"expected MODULE:AGENT, got {target!r}")
    cwd = cwd_first()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise UsageError(f"no module named {module_name!r} (looked in {cwd} first)") from None
        raise UsageError(f"importing {module_name} failed: {e}") from None
    except Exception as e:
        raise UsageError(f"importing {module_name} failed: {type(e).__name__}: {e}") from None
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UsageError(f"module {module_name} has no agent {qualname!r}")
    if not isinstance(obj, AgentDef) and not callable(obj):
        raise UsageError(f"{target} is not an agent (decorate it with @engine.agent)")
    return obj
