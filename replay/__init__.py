"""Operator tools over recorded history: the timeline story, the recovery context, diffs,
export/import, and the ``agentlog`` command line (``replay.cli``) with its demo."""

from .context import recovery_context
from .diff import compare
from .transfer import export_lines, import_run, read_lines

__all__ = ["compare", "export_lines", "import_run", "read_lines", "recovery_context"]
