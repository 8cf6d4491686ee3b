"""How an ``agentlog`` command ends: its exit status, and on failure one clear line (three
at most) on stderr with any password masked. Both paths use it: the quick one (``quick``)
and the Typer app (``full``)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from engine.errors import AgentlogError

from ..output import printable, quiet_stdout


def fail(message: str, url: str, code: int) -> int:
    """One clear line (three at most) on stderr, any password masked."""
    from engine.store.url import scrub

    message = scrub(message, url)
    # split on newlines only: a CR or another break inside a line is escaped, not obeyed
    lines = [ln for ln in message.strip().split("\n") if ln.strip()][:3] or ["failed"]
    lines[0] = f"agentlog: error: {lines[0]}"
    sys.stderr.write("\n".join(printable(ln[:500]) for ln in lines) + "\n")
    return code


def guarded(work: Callable[[], object], url: str) -> int:
    """Run a command (``work``) and turn how it ended into an exit status: its own (an
    int), 2 for an engine error, 130 when interrupted, 1 for anything unexpected."""
    try:
        rv = work()
    except AgentlogError as e:
        return fail(str(e) or type(e).__name__, url, 2)
    except KeyboardInterrupt:
        sys.stderr.write("agentlog: interrupted\n")
        return 130
    except BrokenPipeError:  # written past Out (the demo's panels): the reader took enough
        quiet_stdout()
        return 0
    except Exception as e:
        if os.environ.get("AGENTLOG_DEBUG"):
            traceback.print_exc()
        return fail(
            f"unexpected {type(e).__name__}: {e}\n(set AGENTLOG_DEBUG=1 to see the traceback)",
            url,
            1,
        )
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    return rv if isinstance(rv, int) else 0
