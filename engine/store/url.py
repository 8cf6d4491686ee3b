"""One URL -> one store: ``memory://``, ``sqlite:///path``, ``postgresql://...``."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import StoreUnavailable
from .base import Store

DEFAULT_URL = "sqlite:///./agentlog.db"
CIPHER_ENV = "AGENTLOG_CIPHER_KEY"
_SIZE_OPTIONS = ("blob_threshold", "max_payload")


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


def mask(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    try:
        parts = urlsplit(url)
        if parts.password:
            netloc = parts.netloc.replace(":" + parts.password + "@", ":***@", 1)
            return parts._replace(netloc=netloc).geturl()
    except ValueError:
        # Malformed (say, a bad IPv6 host): still never show what may be a password.
        scheme, sep, rest = url.partition("://")
        userinfo, at, host = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        if sep and at and colon:
            return f"{scheme}://{user}:***@{host}"
    return url


def open_store(url: str | None = None, *, create: bool = True, **options: Any) -> Store:
    """Open the store named by ``url``; one clear :class:`StoreUnavailable` if it can't be.

    ``create=False`` creates nothing: a missing SQLite file is refused ("no store at ..."),
    and a database without agentlog's tables reads as an empty store.
    """
    url = url or default_url()
    name = mask(url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StoreUnavailable(
            f"{name}: not a store URL (try sqlite:///path, memory://, postgresql://...)"
        )
    path, _, query = rest.partition("?")
    params = dict(parse_qsl(query))
    for key in _SIZE_OPTIONS:
        if key in params:
            try:
                options.setdefault(key, int(params.pop(key)))
            except ValueError:
                raise StoreUnavailable(f"{name}: {key} must be an integer") from None
    scheme = scheme.lower()
    if scheme == "memory":
        from .memory import open_memory

        return open_memory(name, **options)
    if scheme == "sqlite":
        from .sqlite import open_sqlite

        if not path.startswith("/") or path == "/":
            raise StoreUnavailable(
                f"{name}: expected sqlite:///relative/path or sqlite:////abs/path"
            )
        sync = params.pop("synchronous", "FULL")
        return open_sqlite(name, unquote(path[1:]), synchronous=sync, create=create, **options)
    if scheme in ("postgresql", "postgres"):
        return _open_pg(url, name, params, create, options)
    raise StoreUnavailable(f"{name}: unknown store scheme {scheme!r} (memory, sqlite, postgresql)")


def _open_pg(
    url: str, name: str, params: dict[str, str], create: bool, options: dict[str, Any]
) -> Store:
    from .postgres import open_postgres

    try:
        parts = urlsplit(url)
        port = parts.port or 5432
    except ValueError as e:
        raise StoreUnavailable(f"{name}: malformed URL ({e})") from None
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname or not parts.hostname:
        raise StoreUnavailable(
            f"{name}: expected postgresql://user[:password]@host[:port]/database"
        )
    for key in ("pool_size", "max_overflow"):
        if key in params:
            try:
                options[key] = int(params.pop(key))
            except ValueError:
                raise StoreUnavailable(f"{name}: {key} must be an integer") from None
    return open_postgres(
        name,
        host=parts.hostname,
        port=port,
        dbname=dbname,
        user=unquote(parts.username or "postgres"),
        password=unquote(parts.password or ""),
        schema=params.pop("schema", "public"),
        create=create,
        **options,
    )
