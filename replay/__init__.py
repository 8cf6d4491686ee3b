"""Operator tools over recorded history: the timeline story, the recovery context, diffs,
export/import, and the ``agentlog`` command line (``replay.cli``) with its demo.

The functions load on first access (PEP 562), so the command line loads only what a
command uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine._lazy import lazy_exports

if TYPE_CHECKING:
    from .context import recovery_context
    from .diff import compare
    from .transfer import export_lines, import_run, read_lines

# name -> the module (relative to this package) that defines it, loaded on first access
_LAZY = {
    "compare": ".diff",
    "export_lines": ".transfer",
    "import_run": ".transfer",
    "read_lines": ".transfer",
    "recovery_context": ".context",
}

__all__ = ["compare", "export_lines", "import_run", "read_lines", "recovery_context"]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
