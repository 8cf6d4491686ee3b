"""``agentlog ui``: the web UI (``replay.ui``, the optional ``agentlog[ui]`` extra) served
by uvicorn on loopback, or on any other address only behind an access token."""

from __future__ import annotations

import ipaddress
import socket
from types import FrameType
from typing import Annotated, Any

import typer

from engine.errors import UsageError

from ..targets import cwd_first
from .app import app, session

INSTALL = "pip install 'agentlog[ui]'"
_NEEDS = ("starlette", "jinja2", "uvicorn", "multipart")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def loopback(addr: str) -> bool:
    """Whether ``addr`` reaches only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def allowed_hosts(addr: str, token: str | None) -> tuple[str, ...] | None:
    """The host names a request may name (None: any, behind a token). Without a token
    (loopback only), a request must name this machine as the server was bound: a site
    whose name is rebound to the address (DNS rebinding) gets no page and no CSRF value."""
    if token is not None:
        return None
    return (*LOOPBACK_HOSTS, addr, f"[{addr}]") if ":" in addr else (*LOOPBACK_HOSTS, addr)


def _check_installed() -> None:
    import importlib.util

    missing = [m for m in _NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"the web UI needs {', '.join(missing)}: {INSTALL}")


def _bound(addr: str, port: int) -> socket.socket:
    """A listening socket on ``addr:port``, or one clear line why not."""
    try:
        family, kind, _, _, where = socket.getaddrinfo(
            addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
    except OSError as e:
        raise UsageError(f"cannot listen on {addr}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    return sock


@app.command("ui")
def ui_cmd(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free one).")
    ] = 8765,
    addr: Annotated[
        str,
        typer.Option("--addr", help="Address to listen on (not loopback: --token needed)."),
    ] = "127.0.0.1",
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="AGENTLOG_UI_TOKEN",
            help="Access token every request must present (a first visit: ?token=T).",
            show_default=False,
        ),
    ] = None,
) -> int:
    """Serve the web UI (runs board, run pages with timeline, state, diff and actions,
    stats; live) at http://ADDR:PORT/ until interrupted."""
    _check_installed()
    if token is not None and len(token) < 16:
        raise UsageError("--token must be at least 16 characters long")
    if token is None and not loopback(addr):
        raise UsageError(f"--addr {addr} is not loopback: give --token T to serve it there")
    s = session(ctx)
    cwd_first()  # the actions import a run's agent by its recorded module, as `answer` does
    engine = s.engine
    engine.store  # a missing store fails now, not on the first page  # noqa: B018
    sock = _bound(addr, port)
    host, bound = sock.getsockname()[:2]
    s.out.line(f"serving the agentlog UI on http://{host}:{bound}/ (Ctrl-C stops)")
    s.out.stream.flush()
    _serve(engine, addr, token, sock)
    return 0


def _serve(engine: Any, addr: str, token: str | None, sock: socket.socket) -> None:
    import uvicorn

    from ..ui import app as ui_app

    web = ui_app(engine, token=token, hosts=allowed_hosts(addr, token))

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            web.state.news.stop()  # open pages' live streams end now, not at a timeout
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        web, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=5
    )
    Server(config).run(sockets=[sock])
