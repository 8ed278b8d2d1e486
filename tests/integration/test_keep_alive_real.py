"""Patch 0008 on real parts: a streamed answer leaves its HTTP connection open.

Real parts: the llama-server `fronde install` built (patched by default; the test skips,
saying so, on a stock build) serving SmolLM2-135M as Fronde's baseline server. b11434's
chunked content provider returned false after ``sink.done()``, which cpp-httplib takes
for a cancel: the server closed the socket after every streamed answer although its
headers said ``Keep-Alive`` (docs/llama-patches.md). A client that sends its next
request on that socket gets no answer; one with a pool opens a new connection.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fronde.backends.capability import PER_REQUEST_FLAG
from fronde.modes import Mode

from .conftest import SMOLLM2, patched_server
from .test_per_request_spec_real import server_argv

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def baseline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """SmolLM2 as Fronde's baseline server, one slot: (port, log)."""
    log = tmp_path_factory.mktemp("keep-alive") / "server.log"
    argv = server_argv(SMOLLM2, Mode.BASELINE, ("-np", "1"))
    with patched_server(argv, log, PER_REQUEST_FLAG) as base:
        yield int(base.rsplit(":", 1)[1]), log


def chat(conn: http.client.HTTPConnection, stream: bool) -> http.client.HTTPResponse:
    """Send a short greedy chat request on ``conn`` and read its whole answer.

    Returns:
        The response, its body read to the end (for a stream: up to ``data: [DONE]``
        and the chunked body's last, empty chunk).

    Raises:
        http.client.RemoteDisconnected, ConnectionError: the server had closed ``conn``.
    """
    body = {
        "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": stream,
    }
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(body),
        headers={"Content-Type": "application/json"},
    )
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200, data[-500:]
    if stream:
        assert data.rstrip().endswith(b"data: [DONE]"), data[-200:]
    return r


def test_streamed_answer_keeps_the_connection(baseline_server: tuple[int, Path]) -> None:
    """Two streamed answers, then a plain one, all on one TCP connection.

    Each response advertises keep-alive (no ``Connection: close``), and the next request
    on the same socket is answered: b11434 closed the socket after the first stream, so
    the second request found it shut.
    """
    port, log = baseline_server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        first = chat(conn, stream=True)
        assert first.getheader("Connection", "").lower() != "close"
        assert not first.will_close
        sock = conn.sock
        assert isinstance(sock, socket.socket)
        local = sock.getsockname()
        for stream in (True, False):
            try:
                r = chat(conn, stream)
            except (http.client.RemoteDisconnected, ConnectionError) as exc:
                tail = log.read_text(errors="replace")[-1000:]
                pytest.fail(f"the server closed the connection after a stream: {exc!r}\n{tail}")
            assert r.getheader("Connection", "").lower() != "close"
            assert conn.sock is sock, "http.client opened a new connection"
            assert sock.getsockname() == local
    finally:
        conn.close()
