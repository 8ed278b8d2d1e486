"""The sockets ``fronde serve`` listens on, bound before any backend starts.

Binding here rather than in uvicorn holds the port while the backends load, and turns
a taken port into Fronde's one-line error (:func:`listen`).
"""

from __future__ import annotations

import errno
import socket

from fronde.errors import FrondeError

__all__ = ["listen"]


def listen(host: str, port: int) -> list[socket.socket]:
    """Bind ``host:port`` before any backend starts; uvicorn then serves on these sockets.

    Bound as asyncio binds for uvicorn (every address ``host`` resolves to,
    ``SO_REUSEADDR`` so a socket in TIME_WAIT does not count as taken, IPv6 sockets
    IPv6-only) and listening at once. Doing it here rather than in uvicorn holds the
    port while the backends load, and a taken port is Fronde's one line, not
    uvicorn's log line and exit status 3. The llama-server children do not inherit
    the sockets (Python's are not inheritable).

    Raises:
        FrondeError: the port is taken, needs root, or the address is not this machine's.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        msg = f"cannot listen on {host}:{port}: {exc.strerror or exc}: check --host"
        raise FrondeError(msg) from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen()  # held from now on: another SO_REUSEADDR bind cannot take it
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = "is in use: pass --port N, or stop what listens there"
        elif exc.errno == errno.EACCES:
            why = "needs more privileges (ports below 1024 need root): pass --port N"
        else:
            why = f"cannot be listened on ({exc.strerror}): check --host"
        raise FrondeError(f"{host}:{port} {why}") from exc
    return sockets
