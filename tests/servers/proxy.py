"""A TCP proxy the tests control: it forwards to a real server and can hold or cut traffic.

Put between ateam and a real Redis, it plays the network's faults, which a test cannot
get from the server itself:

* :meth:`TcpProxy.pause` — a silent partition. Connections stay open and new ones are
  accepted, but no byte moves either way; what was sent waits in the socket buffers, as
  TCP would keep retransmitting it, and flows again on :meth:`TcpProxy.resume`.
* :meth:`TcpProxy.drop` — every open connection is reset at once, as when a NAT or
  firewall forgets them; new connections work.
* :meth:`TcpProxy.reset_next` — the next connections are reset as they arrive, as a
  server that is restarting would.

Threads, not asyncio: the proxy must keep its own pace while the test's event loop is
busy or blocked, and each thread ends when its connection does (or at :meth:`close`).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

__all__ = ["TcpProxy"]

_CHUNK = 65536


@dataclass
class _Link:
    """One client connection and its upstream twin."""

    client: socket.socket
    upstream: socket.socket | None = None
    closed: threading.Event = field(default_factory=threading.Event)

    def close(self, *, reset: bool = False) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                if reset:  # linger 0: close sends RST, as a vanished peer's stack would
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv
            with contextlib.suppress(OSError):
                sock.close()


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``upstream_host:upstream_port``.

    Use as a context manager, or call :meth:`start` and :meth:`close`.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopping = threading.Event()
        self._links: list[_Link] = []
        self._guard = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._to_reset = 0
        self.accepted = 0
        """Connections accepted so far (a client that reconnects shows here)."""

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> TcpProxy:
        self._spawn(self._accept_loop, "proxy-accept")
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # faults ------------------------------------------------------------------------------

    def pause(self) -> None:
        """A silent partition: nothing moves until :meth:`resume`."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def drop(self) -> None:
        """Reset every open connection now."""
        with self._guard:
            links, self._links = self._links, []
        for link in links:
            link.close(reset=True)

    def reset_next(self, count: int) -> None:
        """Reset the next ``count`` connections as soon as they are accepted."""
        with self._guard:
            self._to_reset += count

    def close(self) -> None:
        self._stopping.set()
        self._flowing.set()  # let held pumps see the end
        self.drop()
        with contextlib.suppress(OSError):
            self._listener.close()
        for thread in self._threads:
            thread.join(5)

    # forwarding ----------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            self.accepted += 1
            link = _Link(client)
            with self._guard:
                reset, self._to_reset = self._to_reset > 0, max(self._to_reset - 1, 0)
                if not reset:
                    self._links.append(link)
            if reset:
                link.close(reset=True)
                continue
            self._spawn(self._open, "proxy-link", link)

    def _open(self, link: _Link) -> None:
        # During a partition not even the connection reaches the server.
        self._flowing.wait()
        try:
            link.upstream = socket.create_connection(self.upstream, timeout=5)
            link.upstream.settimeout(None)
        except OSError:
            link.close(reset=True)
            return
        if link.closed.is_set():  # dropped while connecting
            link.close(reset=True)
            return
        self._spawn(self._pump, "proxy-up", link, link.client, link.upstream)
        self._pump(link, link.upstream, link.client)

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not link.closed.is_set():
                data = src.recv(_CHUNK)
                if not data:
                    break
                # Held here while paused; the rest waits in the kernel's buffers.
                self._flowing.wait()
                if link.closed.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            link.close()
