"""Request/reply between clients and one agent over Redis lists (SPEC §4.4).

A request is ``RPUSH``-ed onto the agent's request list as ``<request id>\\n<msgpack>``;
the id travels outside the msgpack body so that even a request whose body is malformed
gets an error reply instead of silence. The caller waits on a reply list of its own with
``BLPOP`` in the same pipeline, so a call costs the caller one round trip. A Lua script
refuses at once with ``agent.not_found`` when the agent's liveness key is gone, rather
than letting the caller wait out its deadline.

Mutating methods check ownership (SPEC §4.3): the request's ``caller`` must be the
session named in ``owner:{agent}`` *and* its ``auth`` must be the token whose SHA-256
that hash holds (see :mod:`ateam.bus.ownership`); the session id alone is public.

A request refused before it reaches a method (no id, not msgpack, too large) is
reported (the agent makes it a ``warn`` event), but folded (:class:`RefusalFold`): the
first at once, the ones after it as one report with their count per
:data:`~ateam.constants.RPC_REFUSAL_FOLD_S`. The event log is bounded by count, so
unfolded, ten thousand garbage requests would push every real event out of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import reprlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.bus.codec import pack, unpack
from ateam.bus.keys import Keys
from ateam.bus.ownership import token_digest
from ateam.constants import (
    PROTOCOL_VERSION,
    RPC_DEFAULT_DEADLINE_S,
    RPC_IDEMPOTENCY_S,
    RPC_MAX_PAYLOAD,
    RPC_REFUSAL_FOLD_S,
)
from ateam.errors import (
    AgentNotFound,
    AteamError,
    BadRequest,
    Code,
    NoSuchMethod,
    OwnershipDenied,
    PayloadTooLarge,
    RedisUnavailable,
    RpcError,
    RpcTimeout,
    rpc_error_from_wire,
)
from ateam.wire.entry import Result
from ateam.wire.rpc import P, Params, parse_params

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Call:
    """One decoded request, as a handler sees it."""

    id: str
    method: str
    params: dict[str, Any]
    """The parameters as they came; handlers read them typed through :meth:`args`."""
    caller: str | None
    deadline: float
    checked: Params | None = None
    """``params`` checked against the method's model by the server, before the handler."""
    auth_sha256: str | None = None
    """SHA-256 (hex) of the request's ``auth`` token, never the token itself: what a
    handler compares with a published hash to know who asked (``team.input`` from a
    teammate, :mod:`ateam.bus.identity`)."""

    def args(self, model: type[P]) -> P:
        """The parameters as ``model``: the server's checked copy, else checked now.

        In-process callers (the agent's REPL, tests) build a :class:`Call` by hand; they
        get the same check, and the same ``bad_request``, as a request off the bus.
        """
        if isinstance(self.checked, model):
            return self.checked
        return parse_params(model, self.method, self.params)


Handler = Callable[[Call], Awaitable[object]]
"""A method's handler. Its reply is a result model (:mod:`ateam.wire.results`), sent as
:meth:`Result.wire <ateam.wire.results.Result.wire>`; the bus also carries a plain
msgpack value as it is, for callers below the agent's catalogue (tests, tools)."""


@dataclass(frozen=True, eq=False)
class Method:
    """An entry of the method catalogue."""

    name: str
    handler: Handler
    mutating: bool
    doc: str
    params: type[Params] | None = None
    """The model the parameters are checked against at the edge, before the handler
    runs (:mod:`ateam.wire.rpc`); a malformed request never reaches the handler."""
    result: type[Result] | None = None
    """The model of the handler's reply (:mod:`ateam.wire.results`): clients read the
    reply through it, and the contract test holds the handler to it."""


OwnerClaim = tuple[str, str]
"""``(session, token_sha256)`` of the current owner, as ``owner:{agent}`` holds them;
the hash is ``""`` for a claim made without a token (which then admits nobody)."""

OwnerLookup = Callable[[], Awaitable[OwnerClaim | None]]


@dataclass(frozen=True)
class Refused:
    """Requests refused before any method saw them, as one report."""

    message: str
    """Why the latest of them was refused (the only one when ``count`` is 1)."""
    count: int
    """How many requests this report stands for."""
    span_s: float = 0.0
    """Seconds from the first of them to the last."""


class RefusalFold:
    """Tells refusals onwards folded: the first of a quiet spell at once, the rest as one
    :class:`Refused` with their count when its interval is over.

    A flood therefore costs one report per ``interval_s``, however fast it comes, and
    nothing is hidden: every refusal is in some report's count. The clock is the
    caller's (monotonic seconds), so the folding is the same on a slow machine.

    Args:
        report: Told each report.
        interval_s: How long refusals after a report are folded; 0 tells each at once.
    """

    def __init__(self, report: Callable[[Refused], None], interval_s: float) -> None:
        self._report = report
        self._interval_s = interval_s
        self._until: float | None = None
        """When the interval that folds refusals ends; None while none is open."""
        self._count = 0
        self._latest = ""
        self._first = 0.0
        self._last = 0.0

    @property
    def folded(self) -> int:
        """Refusals waiting for the end of their interval."""
        return self._count

    def add(self, message: str, now: float) -> None:
        """One more refusal, at ``now``."""
        self.tick(now)
        if self._until is None:
            self._until = now + self._interval_s
            self._report(Refused(message, 1))
            return
        if not self._count:
            self._first = now
        self._count += 1
        self._latest, self._last = message, now

    def tick(self, now: float) -> None:
        """Report what was folded once its interval is over."""
        if self._until is None or now < self._until:
            return
        if not self._count:
            self._until = None  # quiet for a whole interval: the next one is told at once
            return
        # Still coming: the next interval folds too, so a flood is one report per interval.
        self._until = now + self._interval_s
        self.flush()

    def flush(self) -> None:
        """Report what is folded now (the server is closing)."""
        if self._count:
            count, self._count = self._count, 0
            self._report(Refused(self._latest, count, self._last - self._first))


class RpcServer:
    """Agent side: serves its request list in arrival order.

    Requests are handled one after another so that two inputs from one console are
    queued in the order they were sent; every handler is expected to return quickly
    (long work is queued, never done inside a call).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        agent: str,
        methods: Mapping[str, Method],
        *,
        current_owner: OwnerLookup,
        on_bad_request: Callable[[Refused], None] | None = None,
        fold_s: float = RPC_REFUSAL_FOLD_S,
    ) -> None:
        self._client = client
        self._keys = keys
        self._agent = agent
        self._methods = methods
        self._current_owner = current_owner
        self._on_bad_request = on_bad_request
        self._refusals = RefusalFold(self._tell_refused, fold_s)
        # Keyed by who asked too (session and token hash): a request id alone is no
        # secret, and a stranger reusing one must neither read the owner's cached reply
        # nor plant a refusal the owner would then be served.
        self._recent: OrderedDict[tuple[str, str, str], tuple[float, bytes]] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._wake = keys.rpc_wake(agent, uuid.uuid4().hex)
        self.served = 0

    def start(self) -> None:
        self._closing = False
        self._task = asyncio.create_task(self._run(), name=f"rpc:{self._agent}")

    async def aclose(self, *, wait: float = 3.0) -> None:
        """Stop accepting requests; those still in the list wait for the next instance.

        The loop is asked to stop rather than cancelled: cancelling a BLPOP could drop
        a request Redis had already handed over. A push to the loop's private wake list
        ends its BLPOP at once; a Redis that is gone or frozen cannot hold the close up
        longer than ``wait`` in all (the loop's own 0.5 s poll, else a cancel).
        """
        self._closing = True
        if self._task is None:
            return
        deadline = time.monotonic() + wait
        await _bounded(self._client.rpush(self._wake, b""), wait)
        await asyncio.wait({self._task}, timeout=max(deadline - time.monotonic(), 0.0))
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None
        # Left behind when a request came first; a frozen Redis keeps it (it holds no data).
        await _bounded(self._client.delete(self._wake), max(deadline - time.monotonic(), 0.1))
        self._refusals.flush()  # refusals still folded are told, never dropped

    async def _run(self) -> None:
        key = self._keys.rpc(self._agent)
        backoff = Backoff()
        while not self._closing:
            # Each turn ends within the BLPOP's 0.5 s: an interval of folded refusals is
            # told soon after it is over, whether more requests come or not.
            self._refusals.tick(time.monotonic())
            try:
                # Requests first: BLPOP takes from the first non-empty list it is given.
                popped = await self._client.blpop([key, self._wake], timeout=0.5)
            except CONNECTION_ERRORS:
                await asyncio.sleep(backoff.next_delay())
                continue
            except RedisError as exc:
                # Refused (a replica after a failover, an ACL): keep serving once it
                # passes, never end silently while the agent lives on.
                log.warning("rpc: request read refused: %s", exc)
                await asyncio.sleep(backoff.next_delay())
                continue
            backoff.reset()
            if popped is None or popped[0] == self._wake.encode():
                continue
            raw: Any = popped[1]
            try:
                await self._serve_one(raw)
            except CONNECTION_ERRORS:
                log.warning("rpc reply lost: Redis unreachable")
            except Exception:
                log.exception("rpc: unexpected failure while serving a request")

    async def _serve_one(self, raw: bytes) -> None:
        request_id, sep, body = raw.partition(b"\n")
        rid = request_id.decode("ascii", "replace")
        if not sep or not rid or len(rid) > 64:
            self._report_bad(f"request without an id ({len(raw)} bytes) dropped")
            return
        reply = await self._reply_for(rid, body)
        if reply is None:
            return
        pipe = self._client.pipeline(transaction=False)
        reply_key = self._keys.reply(self._agent, rid)
        pipe.rpush(reply_key, reply)
        pipe.expire(reply_key, 60)
        await pipe.execute()
        self.served += 1

    async def _reply_for(self, rid: str, body: bytes) -> bytes | None:
        try:
            call, auth = self._decode(rid, body)
        except RpcError as exc:
            self._report_bad(f"{exc.code}: {exc.message}")
            return _error_reply(rid, exc)
        asker = (rid, call.caller or "", call.auth_sha256 or "")
        cached = self._recent.get(asker)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        if call.deadline and call.deadline < time.time():
            log.info("rpc %s %s dropped: past its deadline", call.method, rid)
            return None
        method = self._methods.get(call.method)
        try:
            if method is None:
                raise NoSuchMethod(
                    f"unknown method {reprlib.repr(call.method)}",
                    detail={"methods": sorted(self._methods)},
                )
            if method.mutating:
                await self._check_owner(call, auth)
            if method.params is not None:
                call = replace(call, checked=parse_params(method.params, call.method, call.params))
            reply = _value_reply(rid, await method.handler(call))
            if len(reply) > RPC_MAX_PAYLOAD:
                raise PayloadTooLarge(
                    f"reply of {len(reply)} bytes exceeds {RPC_MAX_PAYLOAD}; ask for less"
                )
        except AteamError as exc:
            reply = _error_reply(rid, exc)
        except (TypeError, ValueError) as exc:
            reply = _error_reply(rid, BadRequest(f"invalid parameters: {exc}"))
        except CONNECTION_ERRORS:
            raise
        except Exception as exc:
            log.exception("rpc %s failed", call.method)
            reply = _error_reply(rid, AteamError(f"{type(exc).__name__}: {exc}"))
        if method is not None and method.mutating:
            self._remember(asker, reply)
        return reply

    def _decode(self, rid: str, body: bytes) -> tuple[Call, str | None]:
        """The call and its ``auth`` token (kept out of :class:`Call`: handlers never see it)."""
        if len(body) > RPC_MAX_PAYLOAD:
            raise PayloadTooLarge(f"request of {len(body)} bytes exceeds {RPC_MAX_PAYLOAD}")
        req = unpack(body)
        version = req.get("v", PROTOCOL_VERSION)
        if isinstance(version, bool) or not isinstance(version, int):
            # reprlib, not repr(), for what a peer sent: the repr of a list nested 1000 deep
            # (msgpack allows 1024) overflows the stack and the request went unanswered;
            # it also keeps a 200 kB string from being echoed back whole.
            raise BadRequest(
                f"'v' must be an integer protocol version, got {reprlib.repr(version)}"
            )
        if version > PROTOCOL_VERSION:
            # New fields are optional, but a newer version may have changed what an old
            # field means: refuse clearly rather than half-understand the request.
            raise BadRequest(
                f"request uses protocol version {version}; this agent understands up to "
                f"version {PROTOCOL_VERSION} (upgrade the agent, or use a matching client)",
                detail={"version": version, "supported": PROTOCOL_VERSION},
            )
        method = req.get("method")
        params = req.get("params") or {}
        if not isinstance(method, str) or not isinstance(params, dict):
            raise BadRequest("request needs a string 'method' and a map 'params'")
        caller = req.get("caller")
        auth = req.get("auth")
        deadline = req.get("deadline")
        if deadline is None:
            deadline = 0.0  # no deadline
        # NaN compares false with every time (it would never expire, nor would +inf),
        # and -inf would be dropped without a word: none of them is a deadline.
        if (
            isinstance(deadline, bool)
            or not isinstance(deadline, int | float)
            or not math.isfinite(deadline)
        ):
            raise BadRequest(f"'deadline' must be a finite unix time, got {reprlib.repr(deadline)}")
        auth = auth if isinstance(auth, str) else None
        call = Call(
            rid,
            method,
            params,
            caller if isinstance(caller, str) else None,
            deadline,
            auth_sha256=token_digest(auth) if auth is not None else None,
        )
        return call, auth

    async def _check_owner(self, call: Call, auth: str | None) -> None:
        owner = await self._current_owner()
        if owner is None:
            raise OwnershipDenied(
                "no console is attached to this agent; attach before changing it",
                detail={"owner": None},
            )
        session, digest = owner
        if session != call.caller:
            raise OwnershipDenied(
                f"{self._agent} is owned by another console", detail={"owner": session}
            )
        # Constant-time, so response timing says nothing about how close a guess was.
        if (
            auth is None
            or not digest
            or not hmac.compare_digest(token_digest(auth).encode(), digest.encode())
        ):
            raise OwnershipDenied(
                f"this request does not carry {self._agent}'s owner token: only the process "
                "that attached may change it (knowing its session id is not enough)",
                detail={"owner": session},
            )

    def _remember(self, asker: tuple[str, str, str], reply: bytes) -> None:
        now = time.monotonic()
        self._recent[asker] = (now + RPC_IDEMPOTENCY_S, reply)
        while self._recent:
            oldest = next(iter(self._recent.values()))
            if oldest[0] > now and len(self._recent) <= 10_000:
                break
            self._recent.popitem(last=False)

    def _report_bad(self, message: str) -> None:
        log.debug("rpc: %s", message)
        self._refusals.add(message, time.monotonic())

    def _tell_refused(self, refused: Refused) -> None:
        # Folded like the events: the log is a file, and garbage must not fill it either.
        if refused.count == 1:
            log.warning("rpc: %s", refused.message)
        else:
            log.warning("rpc: %d requests refused (the latest: %s)", refused.count, refused.message)
        if self._on_bad_request is not None:
            self._on_bad_request(refused)


def _timed_out(agent: str, rid: str) -> RpcTimeout:
    return RpcTimeout(f"{agent} did not answer in time", detail={"agent": agent, "request_id": rid})


async def _bounded(command: Awaitable[Any], seconds: float) -> None:
    """Run a best-effort Redis command, giving up after ``seconds`` or on a dead link."""
    with contextlib.suppress(TimeoutError, *CONNECTION_ERRORS):
        async with asyncio.timeout(seconds):
            await command


def _value_reply(rid: str, value: object) -> bytes:
    if isinstance(value, Result):
        value = value.wire()  # the one place a result model becomes the wire's map
    return pack({"id": rid, "ok": True, "value": value})


def _error_reply(rid: str, error: AteamError) -> bytes:
    return pack({"id": rid, "ok": False, "error": error.to_wire()})


# Push the request only if the agent is alive; otherwise answer for it at once.
_SEND_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('RPUSH', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
"""


@dataclass(eq=False)
class RpcClient:
    """Caller side.

    ``caller`` is the console session id the agent checks ownership against, and
    ``auth`` that session's secret token (:attr:`Ownership.token
    <ateam.bus.ownership.Ownership.token>`); mutating calls need both.
    """

    client: aioredis.Redis
    keys: Keys
    caller: str | None = None
    auth: str | None = field(default=None, repr=False)

    async def call(
        self,
        agent: str,
        method: str,
        params: Mapping[str, object] | None = None,
        *,
        timeout: float = RPC_DEFAULT_DEADLINE_S,
        request_id: str | None = None,
    ) -> object:
        """Call ``method`` on ``agent`` and return its value, or raise its typed error.

        Connection failures are retried with the same request id until the deadline,
        which is safe because mutating methods are idempotent by request id.
        """
        rid = request_id or uuid.uuid4().hex
        deadline = time.time() + timeout
        request: dict[str, object] = {
            "id": rid,
            "method": method,
            "params": dict(params or {}),
            "caller": self.caller,
            "deadline": deadline,
        }
        if self.auth is not None:
            request["auth"] = self.auth
        body = pack(request)
        if len(body) > RPC_MAX_PAYLOAD:
            raise PayloadTooLarge(
                f"request of {len(body)} bytes exceeds the {RPC_MAX_PAYLOAD}-byte limit"
            )
        return await self.send_raw(agent, rid, body, deadline)

    async def send_raw(self, agent: str, rid: str, body: bytes, deadline: float) -> object:
        """Send an already-encoded body (also used by tests to send malformed input)."""
        not_found = pack(
            {
                "id": rid,
                "ok": False,
                "error": AgentNotFound(
                    f"no agent {agent!r} is running on this bus", detail={"agent": agent}
                ).to_wire(),
            }
        )
        reply_key = self.keys.reply(agent, rid)
        backoff = Backoff()
        while True:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise _timed_out(agent, rid)
            try:
                pipe = self.client.pipeline(transaction=False)
                # EVAL, not EVALSHA: a pipelined script object makes redis-py send SCRIPT
                # EXISTS first (an extra round trip per call), and a NOSCRIPT after a
                # Redis restart would leave the BLPOP behind it waiting out the deadline.
                # Redis caches the compiled body, so EVAL costs only its ~300 bytes.
                pipe.eval(
                    _SEND_LUA,
                    3,
                    self.keys.alive(agent),
                    self.keys.rpc(agent),
                    reply_key,
                    rid.encode() + b"\n" + body,
                    not_found,
                    60_000,
                )
                pipe.blpop([reply_key], timeout=max(remaining, 0.01))
                # Bounded even if the connection silently stalls (no socket timeout).
                async with asyncio.timeout(remaining + 1.0):
                    _, popped = await pipe.execute()
            except TimeoutError as exc:
                raise _timed_out(agent, rid) from exc
            except CONNECTION_ERRORS as exc:
                if time.time() + 0.05 >= deadline:
                    raise RedisUnavailable(
                        f"Redis unreachable: {exc}", detail={"agent": agent, "request_id": rid}
                    ) from exc
                await asyncio.sleep(min(backoff.next_delay(), max(deadline - time.time(), 0)))
                continue
            if popped is None:
                raise _timed_out(agent, rid)
            reply = unpack(popped[1])
            if reply.get("ok"):
                return reply.get("value")
            error = reply.get("error")
            raise rpc_error_from_wire(error if isinstance(error, dict) else {"code": Code.INTERNAL})
