"""Owner leases: a run is held by one owner (host, process) only while it executes.

The lease lives in a small table beside the log and is renewed by the engine's keeper
thread (``runtime.lockkeeper``).
A lease that expired, or whose owner provably shares our PID namespace (same host, boot
and namespace) and whose process is gone, is dead and may be taken over; resuming a run
whose owner is alive is refused.

Each lease has an epoch that grows when it passes to another owner. The epoch taken is
the fence every writer of the run carries (:meth:`Leases.fence`), so an owner presumed
dead that comes back (a long pause past its lease) has its next append refused by the
store, whether or not its heartbeat noticed the takeover first.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ... import observe
from ...errors import LeaseTaken, RunBusy, RunInterrupt, StoreError
from ...store import Fence, LeaseStore, Store
from .lockkeeper import Keeper

LEASE_TTL = 30.0
HOST = socket.gethostname()


class Drained(RunInterrupt):
    """This engine's worker drains (SIGTERM): the run stops before its next live call,
    its finished calls recorded, and another worker continues it at once."""


class LeaseLost(RunInterrupt):
    """Another owner took this run's lease (this one was presumed dead): stop at once,
    writing nothing more; the new owner continues the run from its log."""


# An owner id is ``host:pid:nonce:boot.pidns``; the last field proves which PID namespace
# the pid belongs to. Ids written before it existed (``host:pid:nonce``) carry no proof.
_PROOF = re.compile(r"[0-9a-f]{32}\.[0-9]+")


def pid_space() -> str:
    """This process's PID namespace as ``boot-id.namespace-inode`` ('' when it cannot be
    proven: no /proc, or a /proc mounted for another namespace than ours)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip().replace("-", "")
        ns = os.stat("/proc/self/ns/pid").st_ino
        mine = int(os.readlink("/proc/self")) == os.getpid()
    except (OSError, ValueError):
        return ""
    space = f"{boot}.{ns}"
    return space if mine and _PROOF.fullmatch(space) else ""


def new_owner() -> str:
    return f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{pid_space()}"


def alive(owner: str, here: str | None = None) -> bool:
    """Whether ``owner`` may still be running: False only when we can tell it is gone,
    which needs proof that its pid is one of our PID namespace (``here``, by default
    :func:`pid_space`); any other owner is alive until its lease expires."""
    parts = owner.split(":")
    if len(parts) < 4 or not _PROOF.fullmatch(parts[-1]):
        return True  # no proof of its namespace (also an id written by an older version)
    host, pid_text = ":".join(parts[:-3]), parts[-3]
    space = pid_space() if here is None else here
    if host != HOST or parts[-1] != space or not pid_text.isdigit():
        return True  # another machine, boot or PID namespace: only expiry can tell
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and only waits to be reaped (signal 0 still reaches it).
    Read from /proc where there is one; elsewhere a zombie counts as alive until reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:  # gone since the signal reached it, or there is no /proc
        return os.path.isdir("/proc/self")
    except OSError:
        return False
    # The state follows the command name, which is in parentheses and may hold any byte.
    fields = stat[stat.rfind(b")") + 1 :].split()
    return bool(fields) and fields[0] in (b"Z", b"X")


@dataclass
class _Hold:
    """One run's lease as this engine holds it."""

    thread: int  # the thread executing the run: only it may re-enter (run -> resume)
    depth: int = 1
    epoch: int = 0  # the lease's epoch when taken: its writers' fence (0: not taken yet)


class Leases:
    """The leases one engine holds, re-entrant per run (in the holding thread), each
    renewed by ``keeper`` every third of ``ttl``. ``gate`` is asked before each first
    hold of a run (an engine's :class:`~.keygate.KeyGate` check: every execution and
    every change of a run holds its lease first), and may refuse it."""

    def __init__(
        self,
        owner: str,
        keeper: Keeper,
        ttl: float = LEASE_TTL,
        wall: Callable[[], float] = time.time,
        gate: Callable[[Store], None] | None = None,
    ) -> None:
        self.owner = owner
        self._gate = gate
        self.ttl = ttl
        self.wall = wall  # epoch seconds: a lease's expiry is compared across hosts
        self._keeper = keeper
        self._held: dict[str, _Hold] = {}
        self._lost: dict[str, str] = {}  # run -> the owner that took its lease from us
        self._lock = threading.Lock()
        self.draining = False  # set by a worker's drain: every run stops at its next call

    def fence(self, run_id: str) -> Fence | None:
        """The fence the writers of ``run_id`` carry while this engine holds its lease
        (None: not held here; such a writer's appends are not checked)."""
        with self._lock:
            held = self._held.get(run_id)
        return Fence(run_id, held.epoch) if held is not None and held.epoch else None

    def refused(self, run_id: str, error: StoreError) -> None:
        """Raise ``LeaseLost`` if ``error`` is the store refusing an append of ``run_id``
        because another owner took its lease (``LeaseTaken``): every thread of the run
        stops at its next durable call, writing nothing more. Any other error: return."""
        if not isinstance(error, LeaseTaken):
            return
        with self._lock:
            if run_id in self._held:
                self._lost.setdefault(run_id, "another owner")
        raise LeaseLost(f"run {run_id} was taken over; this owner stops: {error}") from None

    def check(self, run_id: str, live: bool = False) -> None:
        """Stop a run whose lease another owner took (we were presumed dead); before
        ``live`` work, also one whose worker drains."""
        holder = self._lost.get(run_id)
        if holder is not None:
            raise LeaseLost(f"run {run_id} was taken over by {holder}; this owner stops")
        if live and self.draining:
            raise Drained(f"run {run_id} stops here: its worker {self.owner} drains")

    def holding(self) -> list[str]:
        """The runs this engine holds the lease of now."""
        with self._lock:
            return list(self._held)

    def stop(self, run_id: str, by: str) -> bool:
        """Tell the thread of this engine executing ``run_id`` to stop at its next durable
        call, as if ``by`` had taken its lease (it writes nothing more); False when no
        thread of this engine holds it."""
        with self._lock:
            if run_id not in self._held:
                return False
            self._lost[run_id] = by
            return True

    def dead_holder(self, store: LeaseStore, run_id: str) -> str | None:
        """The run's lease holder if it is known to be dead or expired, '' if none."""
        lease = store.lease(run_id)
        if lease is None:
            return ""
        owner, until = lease
        if owner == self.owner:  # ours: dead only if no thread of this engine runs it
            with self._lock:
                return None if run_id in self._held else owner
        if until < self.wall() or not alive(owner):
            return owner
        return None

    @contextmanager
    def hold(self, store: Store, run_id: str) -> Iterator[None]:
        """Hold the run's lease for the duration; refuse if a live owner holds it (another
        process, or another thread of this engine)."""
        me = threading.get_ident()
        with self._lock:
            held = self._held.get(run_id)
            if held is not None and held.thread != me:
                raise RunBusy(f"run {run_id} is executing in {self.owner}; it is still alive")
            if held is not None:
                held.depth += 1
            else:  # reserved before the store is asked: two threads cannot both take it
                self._held[run_id] = _Hold(me)
        if held is None:
            try:
                if self._gate is not None:
                    self._gate(store)
                self._take(store, run_id)
            except BaseException:
                with self._lock:
                    del self._held[run_id]
                raise
        try:
            yield
        finally:
            self._let_go(store, run_id)

    def _take(self, store: LeaseStore, run_id: str) -> None:
        with self._lock:
            self._lost.pop(run_id, None)
        now = self.wall()
        holder, epoch = store.take_lease_fenced(run_id, self.owner, now + self.ttl, now)
        if holder != self.owner and not alive(holder):
            until = now + self.ttl
            holder, epoch = store.take_lease_fenced(run_id, self.owner, until, now, dead=holder)
        if holder != self.owner:
            raise RunBusy(f"run {run_id} is executing in {holder}; it is still alive")
        with self._lock:
            self._held[run_id].epoch = epoch
        self._keeper.every(("lease", run_id), self.ttl / 3, lambda: self._beat(store, run_id))

    def _let_go(self, store: LeaseStore, run_id: str) -> None:
        with self._lock:
            hold = self._held[run_id]
            hold.depth -= 1
            if hold.depth > 0:
                return
        # The heartbeat ends before the lease is dropped (a beat in flight would write it
        # back), and the run stays marked held until then (no thread of ours takes it).
        self._keeper.cancel(("lease", run_id), wait=True)
        try:
            _drop(store, run_id, self.owner)
        finally:
            with self._lock:
                del self._held[run_id]

    def _beat(self, store: LeaseStore, run_id: str) -> bool:
        """Renew the run's lease once; False when another owner took it (stop renewing)."""
        now = self.wall()
        try:
            holder, epoch = store.take_lease_fenced(run_id, self.owner, now + self.ttl, now)
        except Exception as e:  # a missed beat is retried at the next one
            observe.get(run_id=run_id).warning("lease_heartbeat_failed", error=str(e))
            return True
        with self._lock:
            held = self._held.get(run_id)
        if holder == self.owner and held is not None and epoch != held.epoch:
            # It was let go (a drain past its grace) or passed through other hands: this
            # beat took it back, so let it go again (another owner takes it at once).
            _drop(store, run_id, self.owner)
            holder = "another owner, since"
        if holder != self.owner:
            observe.get(run_id=run_id).error("lease_lost", holder=holder)
            with self._lock:
                self._lost[run_id] = holder
            return False
        return True


def _drop(store: LeaseStore, run_id: str, owner: str) -> None:
    """Drop the lease; if the store fails, the run's result stands (it is recorded, or
    the run stays running) and the lease expires by itself."""
    try:
        store.drop_lease(run_id, owner)
    except StoreError as e:
        observe.get(run_id=run_id).warning("lease_not_dropped", error=str(e))
