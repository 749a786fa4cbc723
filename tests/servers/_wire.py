"""What the provider wire-format test servers share: lifecycle, answers, recording.

A :class:`WireServer` is a stdlib :class:`~http.server.ThreadingHTTPServer` in a daemon
thread with a thread-safe FIFO of programmed responses, a replaceable default response,
a failure mode that wins over both until lifted, and a record of every request. The
OpenAI and Anthropic servers add their wire formats (the handler and the response
types) on top.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

R = TypeVar("R")
"""The server's response type (its replies and errors)."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: dict[str, Any]
    """The JSON body (empty for a GET)."""


class WireServer(Generic[R]):
    """A programmable endpoint on ``127.0.0.1``; subclasses supply the handler.

    Args:
        port: the port to listen on; 0 picks a free one at the first :meth:`start`, and
            a restart keeps it (so a client's ``base_url`` stays valid).
        default: the answer when nothing is queued.
    """

    handler: ClassVar[type[BaseHTTPRequestHandler]]
    """The wire format; it reaches this server as its ``wire`` attribute."""
    name: ClassVar[str] = "wire"

    def __init__(self, *, port: int, default: R) -> None:
        self.host = "127.0.0.1"
        self._port = port
        self._lock = threading.Lock()
        self._received = threading.Condition(self._lock)
        self._queue: deque[R] = deque()
        self._default: R = default
        self._failure: R | None = None
        self._requests: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> Self:
        """Listen and serve in a daemon thread; returns ``self`` for chaining."""
        if self._httpd is not None:
            return self
        handler = type("_BoundHandler", (self.handler,), {"wire": self})
        httpd = ThreadingHTTPServer((self.host, self._port), handler)
        httpd.daemon_threads = True  # a stuck client must not keep the test run alive
        self._port = int(httpd.server_address[1])
        self._httpd = httpd
        self._thread = threading.Thread(
            # A short poll keeps stop() quick: shutdown() waits for the loop to notice.
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"{self.name}:{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening; connections in flight are dropped with their threads."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port (0 until the first start when none was given)."""
        return self._port

    # programming the answers

    def enqueue(self, *responses: R) -> None:
        """Answer the next requests with these, in order."""
        with self._lock:
            self._queue.extend(responses)

    @property
    def default(self) -> R:
        """The answer when the FIFO is empty; assign to change it at any time."""
        with self._lock:
            return self._default

    @default.setter
    def default(self, response: R) -> None:
        with self._lock:
            self._default = response

    def _fail(self, failure: R) -> None:
        """Answer every request with ``failure``, ahead of the FIFO, until :meth:`recover`."""
        with self._lock:
            self._failure = failure

    def recover(self) -> None:
        """Lift the failure mode: the FIFO and the default answer again."""
        with self._lock:
            self._failure = None

    @property
    def failing(self) -> bool:
        with self._lock:
            return self._failure is not None

    @property
    def pending(self) -> int:
        """How many queued responses are still unused."""
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        """Forget queued responses, the failure mode and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._failure = None
            self._requests.clear()

    # what was received

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests arrived (for tests driving a subprocess).

        Raises:
            TimeoutError: fewer arrived within ``timeout`` seconds.
        """
        with self._received:
            if not self._received.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(
                    f"expected {count} requests, got {len(self._requests)} in {timeout} s"
                )
            return list(self._requests)

    # used by the handler

    def _record(self, request: RecordedRequest) -> None:
        with self._received:
            self._requests.append(request)
            self._received.notify_all()

    def _next_response(self) -> R:
        with self._lock:
            if self._failure is not None:
                return self._failure
            if self._queue:
                return self._queue.popleft()
            return self._default
