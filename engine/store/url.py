"""One URL -> one store: ``memory://``, ``sqlite:///path``, ``postgresql://...``.

URLs are strict: a query parameter the store does not know is refused with the list of
those it accepts, and no message ever shows a password, however malformed the URL.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import StoreUnavailable
from ..secrets import is_secret
from .cipher import CIPHER_ENV, ClearRows, sealed_rows

if TYPE_CHECKING:
    from .base import Store

DEFAULT_URL = "sqlite:///./agentlog.db"
# libpq connection parameters a PostgreSQL URL passes through to psycopg as they are.
LIBPQ = (
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "connect_timeout",
    "application_name",
    "target_session_attrs",
)
_COMMON = ("blob_threshold", "max_payload", "cipher", "keycache")
ACCEPTED = {
    "memory": _COMMON,
    "sqlite": (*_COMMON, "synchronous"),
    "postgresql": (*_COMMON, "schema", "pool_size", "max_overflow", *LIBPQ),
}
# name -> least accepted value, for the parameters that are integers
_INTEGERS = {
    "blob_threshold": 1,
    "max_payload": 1,
    "pool_size": 1,
    "max_overflow": 0,
    "connect_timeout": 0,
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_ENCODE_HINT = "percent-encode special characters in the password (# %23, / %2F, ? %3F, @ %40)"


def default_url() -> str:
    """``$AGENTLOG_URL``, else the SQLite file ``./agentlog.db``."""
    return os.environ.get("AGENTLOG_URL") or DEFAULT_URL


def cipher_configured(url: str | None = None) -> bool:
    """Whether the store ``url`` names (default as :func:`default_url`) encrypts what it
    stores: ``$AGENTLOG_CIPHER_KEY`` is set or the URL says ``?cipher=env``, and the URL
    does not say ``?cipher=none``. A store that cannot get its key refuses to open."""
    query = (url or default_url()).partition("?")[2]
    choice = dict(parse_qsl(query, keep_blank_values=True)).get("cipher")
    if choice == "env":
        return True
    return choice != "none" and bool(os.environ.get(CIPHER_ENV))


def _userinfo(url: str) -> tuple[str, str, str, str] | None:
    """``(scheme, user, password, rest)`` when ``url`` has a password. The password runs
    from the first ``:`` after the user to the *last* ``@``, so one holding unencoded
    ``#``, ``/``, ``?`` or ``@`` is still found whole (at worst more is taken)."""
    scheme, sep, tail = url.partition("://")
    if not sep or tail.startswith("/"):
        return None
    userinfo, at, rest = tail.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return (scheme, user, password, rest) if at and colon else None


def mask(url: str) -> str:
    """``url`` with any password replaced by ``***``: the userinfo's, and the value of any
    query parameter with a secret name (``?password=``, ``?token=``)."""
    url = _QUERY_SECRET.sub(_masked_param, url)
    found = _userinfo(url)
    if found is None:
        return url
    scheme, user, _, rest = found
    return f"{scheme}://{user}:***@{rest}"


_QUERY_SECRET = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")


def _is_secret_param(m: re.Match[str]) -> bool:
    return bool(m[3]) and is_secret(unquote(m[2]))


def _masked_param(m: re.Match[str]) -> str:
    if m[2] == "keycache" and "@" in unquote(m[3]):  # a Redis URL with credentials
        return f"{m[1]}{m[2]}=***"
    return f"{m[1]}{m[2]}=***" if _is_secret_param(m) else m[0]


def scrub(message: str, url: str) -> str:
    """``message`` with ``url`` shown masked and its password, as written or decoded,
    replaced by ``***`` wherever it appears."""
    if not url:
        return message
    message = message.replace(url, mask(url))
    for m in _QUERY_SECRET.finditer(url):
        if _is_secret_param(m):
            for secret in sorted({m[3], unquote(m[3])}, key=len, reverse=True):
                message = message.replace(secret, "***")
    found = _userinfo(url)
    if found is not None and found[2]:
        for secret in sorted({found[2], unquote(found[2])}, key=len, reverse=True):
            message = message.replace(secret, "***")
    return message


def open_store(url: str | None = None, *, create: bool = True, **options: Any) -> Store:
    """Open the store named by ``url``; one clear :class:`StoreUnavailable` if it can't be,
    a :class:`CipherError` if its encryption settings do not match the store's seal.

    ``create=False`` creates nothing: a missing SQLite file is refused ("no store at ..."),
    and a database without agentlog's tables (or ``memory://``) reads as an empty store
    that refuses appends.
    """
    from .seal import check_seal  # with the adapter: `agentlog --help` loads no store code

    store = _open(url, create, options)
    try:
        check_seal(store, write=create)
        _keycache(store, url or default_url())
    except BaseException:
        store.close()
        raise
    return store


def _keycache(store: Store, url: str) -> None:
    """Put the URL's ``?keycache=redis://...`` in front of the store's ledger reads (it is
    never passed to the database; ``redis`` is imported only then)."""
    query = url.partition("?")[2]
    target = dict(parse_qsl(query, keep_blank_values=True)).get("keycache")
    if target is None:
        return
    if not target.startswith(("redis://", "rediss://", "unix://")):
        raise StoreUnavailable(f"{store.name}: keycache must be a redis://host:port/db URL")
    from .keycache import KeyCache, attach

    try:
        attach(store, KeyCache(target, mask(target)))
    except ImportError:
        raise StoreUnavailable(
            f"{store.name}: ?keycache needs the redis client: pip install 'agentlog[keycache]'"
        ) from None


def _open(url: str | None, create: bool, options: dict[str, Any]) -> Store:
    url = url or default_url()
    name = mask(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StoreUnavailable(
            f"{name}: not a store URL (try sqlite:///path, memory://, postgresql://...)"
        )
    scheme = "postgresql" if scheme.lower() == "postgres" else scheme.lower()
    if scheme not in ACCEPTED:
        raise StoreUnavailable(
            f"{name}: unknown store scheme {scheme!r} (memory, sqlite, postgresql)"
        )
    if scheme == "postgresql":
        _check_authority(url, name)  # before the query: it may hold part of a password
    path, _, query = rest.partition("?")
    params = _params(name, scheme, query)
    for key, value in params.items():
        if key in _INTEGERS and key not in LIBPQ:
            options.setdefault(key, value)
    options.setdefault("rows", _rows(name, params.get("cipher")))
    if scheme == "memory":
        from .memory import open_memory

        return open_memory(name, read_only=not create, **options)
    if scheme == "sqlite":
        from .sqlite import open_sqlite

        if not path.startswith("/") or path == "/":
            raise StoreUnavailable(
                f"{name}: expected sqlite:///relative/path or sqlite:////abs/path"
            )
        sync = str(params.get("synchronous", "FULL"))
        return open_sqlite(name, unquote(path[1:]), synchronous=sync, create=create, **options)
    return _open_pg(url, name, params, create, options)


def _params(name: str, scheme: str, query: str) -> dict[str, Any]:
    """The URL's query parameters, each known to ``scheme`` and given once; integers
    converted."""
    accepted = ACCEPTED[scheme]
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise StoreUnavailable(f"{name}: malformed query (expected ?name=value&...)") from None
    params: dict[str, Any] = {}
    for key, value in pairs:
        if key not in accepted:
            raise StoreUnavailable(
                f"{name}: unknown parameter {key[:40]!r} for a {scheme} store "
                f"(accepted: {', '.join(accepted)})"
            )
        if key in params:
            raise StoreUnavailable(f"{name}: parameter {key!r} is given twice")
        params[key] = _integer(name, key, value) if key in _INTEGERS else value
    return params


def _integer(name: str, key: str, value: str) -> int:
    least = _INTEGERS[key]
    try:
        number = int(value)
    except ValueError:
        number = least - 1
    if number < least:
        raise StoreUnavailable(f"{name}: {key} must be an integer of at least {least}")
    return number


def _rows(name: str, choice: str | None) -> ClearRows:
    """How the store writes its rows: sealed under ``$AGENTLOG_CIPHER_KEY`` when it is
    set (required by ``?cipher=env``), in clear when it is not or ``?cipher=none``."""
    if choice not in (None, "env", "none"):
        raise StoreUnavailable(f"{name}: cipher must be env or none")
    key = os.environ.get(CIPHER_ENV, "")
    if choice == "none" or (not key and choice is None):
        return ClearRows()
    if not key:
        raise StoreUnavailable(f"{name}: ?cipher=env, but {CIPHER_ENV} is not set")
    return sealed_rows(name, key)


def _check_authority(url: str, name: str) -> None:
    """Refuse a PostgreSQL URL whose parts cannot be told apart: an ``@`` or ``#`` after
    the host means a password with unencoded characters, which must not be guessed at."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        raise StoreUnavailable(f"{name}: malformed URL ({_ENCODE_HINT})") from None
    if parts.fragment or "#" in url or "@" in parts.path + parts.query:
        raise StoreUnavailable(f"{name}: malformed URL ({_ENCODE_HINT})")


def _open_pg(
    url: str, name: str, params: dict[str, Any], create: bool, options: dict[str, Any]
) -> Store:
    from .postgres import open_postgres

    parts = urlsplit(url)
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname or not parts.hostname:
        raise StoreUnavailable(
            f"{name}: expected postgresql://user[:password]@host[:port]/database"
        )
    schema = str(params.get("schema", "public"))
    own = schema.lower().startswith("pg_") or schema.lower() == "information_schema"
    if own or not _IDENTIFIER.fullmatch(schema):
        raise StoreUnavailable(
            f"{name}: schema must be an SQL identifier (letters, digits and _, at most 63, "
            "not PostgreSQL's own pg_... or information_schema)"
        )
    return open_postgres(
        name,
        host=parts.hostname,
        port=parts.port or 5432,
        dbname=dbname,
        user=unquote(parts.username or "postgres"),
        password=unquote(parts.password or ""),
        schema=schema,
        create=create,
        libpq={k: str(v) for k, v in params.items() if k in LIBPQ},
        **options,
    )
