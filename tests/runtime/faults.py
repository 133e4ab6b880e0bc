"""Fault injection with real servers: a TCP proxy that can be cut, stopped and started again.

Tests put :class:`TcpProxy` between a client and a live Redis or PostgreSQL and then break
the network the way production does: ``stop()`` closes every connection and refuses new
ones (the server is "down"), ``start()`` listens again on the same port (it is "back"), and
``lose_next_reply()`` forwards the client's next request to the server but drops the answer
and closes the connection (the request took effect; the client cannot know).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.mute = False  # drop what the server sends back
        self.closed = False

    def close(self) -> None:
        self.closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target``; the port stays the same across stop/start."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._listener: socket.socket | None = None
        self._lose_next = False
        self.accepted = 0

    # -- control ---------------------------------------------------------------------------
    def start(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut every open one."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.cut()

    def cut(self) -> None:
        """Close every open connection (new ones are still accepted)."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def lose_next_reply(self) -> None:
        """The next request any client sends reaches the server; its reply never comes back."""
        self._lose_next = True

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- pumps -----------------------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):  # forward small requests at once, as a direct connection would
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
                self.accepted += 1
            threading.Thread(target=self._pump, args=(link, client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, upstream, client, False), daemon=True).start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        while True:
            try:
                chunk = source.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                link.close()
                return
            if not requests and link.mute:
                continue
            losing = requests and self._lose_next
            if losing:  # mute before forwarding, or a fast reply could slip through
                self._lose_next = False
                link.mute = True
            try:
                sink.sendall(chunk)
            except OSError:
                link.close()
                return
            if losing:
                threading.Thread(target=self._close_later, args=(link,), daemon=True).start()

    def _close_later(self, link: _Link) -> None:
        time.sleep(0.3)  # long enough for the server to run (and commit) the request
        link.close()
        with self._lock:
            if link in self._links:
                self._links.remove(link)
