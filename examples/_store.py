"""Where the examples keep their store: ``$AGENTLOG_URL`` when it is set, else a SQLite
file in a fresh temporary directory, which then holds the example's outside files too
(a recover process started with the same environment finds them all)."""

from __future__ import annotations

import os
import tempfile

from engine import Engine


def engine_for(name: str, **files: str) -> Engine:
    """An engine on the example's store. ``files`` maps an environment variable to a
    file name: unless the variable is set, it names that file in the temporary directory."""
    if not os.environ.get("AGENTLOG_URL"):
        where = tempfile.mkdtemp(prefix=f"agentlog-{name}-")
        os.environ["AGENTLOG_URL"] = f"sqlite:///{where}/{name}.db"
        for variable, file in files.items():
            os.environ.setdefault(variable, os.path.join(where, file))
    return Engine.open()
