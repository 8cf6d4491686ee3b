"""Patching: ``run.patched(name)`` lets changed code keep old runs on their old path.

Live, with code that has the patch, the run records a ``patch_marked`` marker and takes
the new path. Replaying a run whose log went past this point without the marker, the
answer is False: the old path, so the calls that follow still match the log. A marker is
not a call and takes no call number: where it is absent the log took the old path, and
a marker no code asks for any more (``run.deprecate_patch``, then nothing) is inert.
"""

from __future__ import annotations

from ... import events as ev
from ...errors import UsageError
from ...kinds import RunStatus
from .context import RunContext


def patched(ctx: RunContext, name: str) -> bool:
    """Whether this run takes the patch ``name``: the same answer for every call of it in
    one execution (the first decides)."""
    checked(name)
    known = ctx.patches.get(name)
    if known is not None:
        return known
    taken = name in ctx.journal.patches or not passed(ctx)
    if taken and name not in ctx.journal.patches:
        ctx.live(ctx.calls + 1, f"patch {name!r}")  # verifying: the log ends here
        ctx.record(ev.PatchMarked(at=ctx.config.wall(), name=name, after=ctx.calls))
    ctx.patches[name] = taken
    return taken


def deprecate(ctx: RunContext, name: str) -> None:
    """The patch ``name`` is everywhere now: its marker, recorded or not, is inert and
    nothing is recorded (the code keeps only the patched path)."""
    checked(name)
    ctx.check_diverged()


def passed(ctx: RunContext) -> bool:
    """Whether the run's log goes on past the point this execution has reached: a call
    recorded after the calls made so far, or the run completed here."""
    if ctx.journal.last_call > ctx.calls:
        return True
    return ctx.writer.state.status == RunStatus.COMPLETED


def checked(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"a patch needs a name (a non-empty string), not {name!r}")
    return name
