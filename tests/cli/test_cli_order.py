"""The commands are listed (``agentlog --help``, docs/reference/cli.md) in one order,
whichever CLI module a process imported first: registration follows import order, and a
test importing one module early once made the generated reference look stale."""

from __future__ import annotations

import subprocess
import sys

_LIST = (
    "from replay.cli.full import app; print([c.callback.__name__ for c in app.registered_commands])"
)


def _order(first: str) -> str:
    code = f"{first}; {_LIST}" if first else _LIST
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


def test_the_command_order_does_not_follow_import_order() -> None:
    fresh = _order("")
    assert _order("import replay.cli.working, replay.cli.tree, replay.cli.reading") == fresh
    assert fresh.index("'demo'") < fresh.index("'runs'") < fresh.index("'worker'")
