"""``agentlog ui``: refused (exit 2, one line) on a public address without a token, with a
short token, without the ``agentlog[ui]`` extra; served on loopback, it answers pages."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import httpx
import pytest
from test_cli_kit import Result, make_workdir, one_line_error, serving, sqlite_url

from replay.cli import web
from replay.cli.entry import run_cli


def ui(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    code = run_cli(["ui", *args, "--url", sqlite_url(tmp_path)])
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def test_a_public_address_without_a_token_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTLOG_UI_TOKEN", raising=False)
    for addr in ["0.0.0.0", "::", "192.168.1.5", "example.org"]:
        one_line_error(ui(tmp_path, capsys, "--addr", addr), "not loopback", "--token")
    one_line_error(ui(tmp_path, capsys, "--addr", "0.0.0.0", "--token", "short"), "16")


def test_loopback_is_only_loopback() -> None:
    assert all(web.loopback(a) for a in ["127.0.0.1", "127.9.9.9", "::1", "localhost"])
    assert not any(web.loopback(a) for a in ["0.0.0.0", "::", "10.0.0.1", "localhost.evil"])


def test_without_the_extra_it_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    one_line_error(ui(tmp_path, capsys), "uvicorn", "pip install 'agentlog[ui]'")


def test_it_serves_the_board_on_loopback(tmp_path: Path) -> None:
    """A real ``agentlog ui --port 0`` process: its first line names the address; the board
    answers there (with the token, only with it); Ctrl-C stops it as it stops the CLI."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    assert work.cli("run", "agents:hello").code == 0
    token = "a-token-long-enough-1234"
    args = ("ui", "--port", "0")
    says = "serving the agentlog UI on http://127.0.0.1:"
    env = {"AGENTLOG_UI_TOKEN": token}
    live = socket.socket()
    with serving(work, *args, says=says, stopped=130, env=env) as (proc, first):
        base = first.split()[-3].rstrip("/")
        assert httpx.get(base + "/", timeout=10).status_code == 401
        board = httpx.get(base + "/", headers={"X-Agentlog-Token": token}, timeout=10)
        assert board.status_code == 200 and "agents:hello" in board.text
        # a page left open holds its live stream: Ctrl-C stops the server all the same
        host, port = base.removeprefix("http://").split(":")
        live.connect((host, int(port)))
        live.sendall(
            f"GET /live HTTP/1.1\r\nHost: {host}\r\nX-Agentlog-Token: {token}\r\n\r\n".encode()
        )
        heard = b""
        while b"agentlog live" not in heard and len(heard) < 8192:
            heard += live.recv(4096)  # the headers, then the stream's first comment
        assert b"200 OK" in heard and b"agentlog live" in heard
    live.close()
    assert proc.stderr is not None
    said = proc.stderr.read().decode()  # Ctrl-C: exit 130, no traceback, no token
    assert token not in said and "Traceback" not in said, said
