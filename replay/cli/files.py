"""Writing a file so that a command that fails never destroys what the file held."""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from collections.abc import Iterable

from engine.errors import UsageError

from .args import shown


def replace_atomically(path: str, chunks: Iterable[bytes], option: str) -> None:
    """Write ``chunks`` to ``path`` through a temporary file beside it, renamed over ``path``
    only once every chunk is written and synced. Whatever fails on the way (the chunks'
    producer raising, an interrupt, a full disk) removes the temporary file and leaves
    ``path`` as it was; a path that cannot be written is a UsageError naming ``option``."""
    target = os.path.realpath(path)  # a symlink's target is replaced, not the link
    folder = _writable_folder(path, target, option)
    # The name is chosen before the file exists, so an interrupt arriving the moment the
    # file is created (mkstemp would return its name only after) still finds it to remove.
    temp = os.path.join(folder, f".agentlog-{uuid.uuid4().hex}.tmp")
    try:
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            where = shown(folder, 200)
            raise UsageError(f"{option}: cannot write in {where}: {e.strerror}") from None
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, _mode_for(target))
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _writable_folder(path: str, target: str, option: str) -> str:
    """The directory ``target`` goes into, after refusing what could never be written."""
    if os.path.isdir(target):
        raise UsageError(f"{option}: {shown(path, 200)} is a directory")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise UsageError(f"{option}: {shown(path, 200)}: no such directory {shown(folder, 200)}")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise UsageError(f"{option}: cannot write {shown(path, 200)}: permission denied")
    return folder


def _mode_for(target: str) -> int:
    """An existing file's own permissions, else 0600: an export holds the run's inputs,
    outputs and results, readable by its owner only."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return 0o600
