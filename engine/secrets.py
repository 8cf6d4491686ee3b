"""Secrets: which names are secret, the values a run has seen under them, the replay key.

A name is secret when it contains one of :data:`WORDS` (case, ``-`` and ``_`` aside). A
secret-named entry is replaced by :data:`REDACTED` before anything persists, at any depth,
and its value joins the run's :class:`Seen` set, which masks it (``***``) inside every
message, evidence and log line the engine writes for the run. The keyed hash that replay
compares arguments with uses a key that never lives in the store (:func:`replay_key`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import json
import os
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

import msgspec

from .errors import UsageError

# CONTRACT's secret words, folded (lower case, no "-" or "_"): "api_key" is "apikey".
WORDS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "authorization",
        "cookie",
        "credential",
        "privatekey",
        "session",
    }
)
REDACTED = "<redacted>"
MASK = "***"
# Shorter values are not masked inside text: a 3-character secret would mask every
# occurrence of, say, "abc" or "200" in every message, and gives little away on its own.
MIN_MASKED = 4


def folded(name: str) -> str:
    """``name`` as secret words are matched: lower case, without ``-``, ``_`` and spaces
    (``"API Key"`` is ``apikey``)."""
    return name.lower().replace("-", "").replace("_", "").replace(" ", "")


def is_secret(name: object, words: frozenset[str] = WORDS) -> bool:
    """Whether ``name`` contains one of ``words`` (which are folded)."""
    return isinstance(name, str) and _named_secret(name, words)


@functools.lru_cache(maxsize=8192)
def _named_secret(name: str, words: frozenset[str]) -> bool:
    """:func:`is_secret` of a string, kept: the same keys come back in every value (a
    2 KB model answer has hundreds of them, a dozen distinct)."""
    plain = folded(name)
    return any(w in plain for w in words)


def is_secret_entry(name: object, value: Any, words: frozenset[str] = WORDS) -> bool:
    """Whether the entry ``name: value`` is secret. A number (or None, or a dict or list
    of only those) named by ``tokens`` (plural) and no other secret word counts a model's
    tokens (``input_tokens``, ``max_tokens``, ``completion_tokens_details``), it is not a
    credential: model calls report usage that way."""
    if not is_secret(name, words):
        return False
    if "token" in words and "tokens" in folded(str(name)) and _counts(value):
        return is_secret(folded(str(name)).replace("tokens", ""), words)
    return True


def _counts(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is a count, or nothing, or only counts (a usage's details)."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return True
    if depth < 3 and isinstance(value, dict):
        return all(_counts(v, depth + 1) for v in value.values())
    if depth < 3 and isinstance(value, list | tuple):
        return all(_counts(v, depth + 1) for v in value)
    return False


# The fields of an event that carry what agents, tools and people gave (never the
# identities, hashes and keys the fold and the ledger match by, nor the run's input,
# which resume needs whole).
PAYLOAD = frozenset(
    {"args", "error", "evidence", "message", "output", "question", "result", "value"}
)
_S = TypeVar("_S", bound=msgspec.Struct)


class Seen:
    """The secret values one run has seen, and the masking of them inside any text."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def __bool__(self) -> bool:
        return bool(self._values)

    def add(self, value: Any) -> None:
        """Remember every text inside ``value`` (a string, a number, or a container of
        them), also as JSON and URLs escape it, so a reply quoting it is masked too."""
        found = {v for leaf in _leaves(value) for v in _forms(leaf) if len(v) >= MIN_MASKED}
        with self._lock:
            if not found <= self._values:
                self._values |= found
                self._pattern = None

    def mask(self, text: str) -> str:
        """``text`` with every value seen replaced by ``***`` (the longest first)."""
        if not self._values or not text:
            return text
        return self._compiled().sub(MASK, text)

    def scrub(self, event: _S) -> _S:
        """``event`` with :meth:`mask_all` applied to its payload fields (arguments,
        results, values, outputs, messages, evidence): what the run writes holds none of
        the secret values it has seen. Free while the run has seen none."""
        if not self._values:
            return event
        changes = {}
        for name in PAYLOAD.intersection(event.__struct_fields__):
            value = getattr(event, name)
            masked = self.mask_all(value)
            if masked != value:
                changes[name] = masked
        return msgspec.structs.replace(event, **changes) if changes else event

    def mask_all(self, value: Any) -> Any:
        """``value`` with :meth:`mask` applied to every string inside it (keys too). A
        container none of whose text holds a seen value (the usual case) is returned as
        it is after one search of its JSON, without a walk."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict | list | tuple) and self._values:
            with contextlib.suppress(TypeError, msgspec.EncodeError):
                if self._compiled().search(msgspec.json.encode(value).decode()) is None:
                    return value
        return self._walk(value)

    def _compiled(self) -> re.Pattern[str]:
        pattern = self._pattern
        if pattern is None:
            with self._lock:
                ordered = sorted(self._values, key=len, reverse=True)
                pattern = self._pattern = re.compile("|".join(map(re.escape, ordered)))
        return pattern

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, dict):
            return {self._walk(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        return value


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes | bytearray):
        yield bytes(value).decode("utf-8", errors="replace")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _leaves(v)


# ``Authorization: Bearer <t>``: the credential ``<t>`` is a secret on its own (an error
# message or a body may quote it bare); Basic's ``user:password`` too, once decoded.
_SCHEME = re.compile(r"\s*(?:bearer|token|basic|digest|apikey|bot|jwt|dpop)\s+(\S+)\s*", re.I)


def _parts(text: str) -> list[str]:
    """``text`` and the credential it carries after an auth scheme (``Bearer <t>``)."""
    found = _SCHEME.fullmatch(text) if len(text) < 8192 else None
    if found is None:
        return [text]
    token = found.group(1)
    out = [text, token]
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        _user, sep, password = base64.b64decode(token, validate=True).decode().partition(":")
        out += [password] if sep else []
    return out


def _forms(text: str) -> set[str]:
    return {
        form
        for part in _parts(text)
        for form in (part, json.dumps(part)[1:-1], _json(part), quote(part, safe=""))
    } | {quote_plus(part) for part in _parts(text)}


def _json(text: str) -> str:
    """``text`` as msgspec writes it inside JSON (non-ASCII kept): what
    :meth:`Seen.mask_all` searches a container's encoding for."""
    return msgspec.json.encode(text).decode()[1:-1]


def redact(value: Any, words: frozenset[str] = WORDS, seen: Seen | None = None) -> Any:
    """``value`` (as normalised: dicts, lists, scalars) with each entry whose name contains
    one of ``words`` replaced by ``<redacted>``, at any depth (a ``[name, value]`` pair in
    a list too); the values replaced join ``seen``, whose values are then masked wherever
    else they appear in ``value`` (a result quoting its own token in another field)."""
    out = _redact(value, words, seen)
    return seen.mask_all(out) if seen else out


def _redact(value: Any, words: frozenset[str], seen: Seen | None) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str) and _named_secret(k, words) and is_secret_entry(k, v, words):
                out[k] = REDACTED
                if seen is not None and v != REDACTED:
                    seen.add(v)
            else:
                out[k] = _redact(v, words, seen) if isinstance(v, _NESTED) else v
        return out
    if isinstance(value, list | tuple):
        return [
            _pair(v, words, seen)
            if isinstance(v, _SEQ) and len(v) == 2
            else _redact(v, words, seen)
            if isinstance(v, _NESTED)
            else v
            for v in value
        ]
    return value


def _pair(value: Any, words: frozenset[str], seen: Seen | None) -> Any:
    """An item of a list: a ``(name, value)`` pair (headers as a list of pairs) with a
    secret name has its value redacted; any other item is redacted as a value."""
    name, v = value
    if isinstance(name, str) and _named_secret(name, words) and is_secret_entry(name, v, words):
        if seen is not None and v != REDACTED:
            seen.add(v)
        return [name, REDACTED]
    return _redact(value, words, seen)


_NESTED = (dict, list, tuple)  # what may hold a named entry: the rest is kept as it is
_SEQ = (list, tuple)  # a tuple, not ``list | tuple``: that builds a union at each test


def secret_names(value: Any, words: frozenset[str] = WORDS, path: str = "") -> list[str]:
    """The dotted paths of the secret-named entries inside ``value`` (``config.api_key``)."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}" if path else str(k)
            found += [where] if is_secret_entry(k, v, words) else secret_names(v, words, where)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found += secret_names(v, words, f"{path}[{i}]")
    return found


# --- the replay key ------------------------------------------------------------------

SECRET_ENV = "AGENTLOG_SECRET_KEY"
# Runs recorded before the key check existed hashed their arguments under this public key
# (or $AGENTLOG_HASH_KEY): they still replay under it, and only they do.
_LEGACY_KEY = "agentlog/args/v1"
_CHECK = b"agentlog-key-check"
_file_keys: dict[Path, bytes] = {}
_file_lock = threading.Lock()


def key_path() -> Path:
    """Where the replay key file lives: ``$XDG_CONFIG_HOME/agentlog/secret.key``, else
    ``~/.config/agentlog/secret.key``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config")
    return Path(base) / "agentlog" / "secret.key"


def replay_key() -> bytes:
    """The key of the hash replay compares arguments with: ``$AGENTLOG_SECRET_KEY``, else
    the key file (created with mode 0600 on first use, never overwritten)."""
    env = os.environ.get(SECRET_ENV)
    if env:
        return env.encode()
    path = key_path()
    with _file_lock:
        key = _file_keys.get(path)
        if key is None:
            key = _file_keys[path] = _read_or_create(path)
    return key


def _read_or_create(path: Path) -> bytes:
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex() + "\n")
                f.flush()
                os.fsync(f.fileno())
            # A hard link never replaces an existing file: of two processes creating the
            # key at once, the first link wins and both read the winner's key.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return _read(path)
    except OSError as e:
        raise UsageError(
            f"cannot create the replay key file {path} ({e.strerror or e}): "
            f"set {SECRET_ENV} or XDG_CONFIG_HOME"
        ) from None


def _read(path: Path) -> bytes:
    key = path.read_bytes().strip()
    if not key:
        raise UsageError(f"the replay key file {path} is empty: remove it or set {SECRET_ENV}")
    return key


def key_check(key: bytes) -> str:
    """A short value recorded with a run that tells whether a key is the run's (it gives
    nothing of the key away)."""
    return hmac.new(key, _CHECK, hashlib.sha256).hexdigest()[:16]


def run_key(check: str | None, run_id: str) -> bytes:
    """The key that replays run ``run_id``, recorded with key check ``check`` (None: a run
    from before the check, hashed under the legacy key). A different key raises UsageError:
    replaying under it would report every call as changed."""
    if check is None:
        return os.environ.get("AGENTLOG_HASH_KEY", _LEGACY_KEY).encode()
    key = replay_key()
    if hmac.compare_digest(key_check(key), check):
        return key
    where = "$" + SECRET_ENV if os.environ.get(SECRET_ENV) else str(key_path())
    raise UsageError(
        f"the replay key differs from the one run {run_id} was recorded with (this one is "
        f"{where}): set {SECRET_ENV} to the recording machine's key, or copy its key file "
        f"to {key_path()}"
    )


def refuse_secret_input(data: dict[str, Any], *, encrypted: bool) -> None:
    """Refuse a run's input with secret-named fields unless the store encrypts what it
    stores: resume needs the input whole, so it cannot be redacted, nor stored in clear."""
    found = secret_names(data)
    if found and not encrypted:
        names = ", ".join(repr(f) for f in found)
        raise UsageError(
            f"the run's input has secret fields ({names}), which would be stored in clear: "
            "give them to the tools that need them from a vault or the environment, or "
            "turn on encryption at rest (AGENTLOG_CIPHER_KEY)"
        )
