"""Property tests for the three edges that take bytes from outside (issue 9).

The wire codec, the RPC envelope and the queue's log file are fed random and mutated
input: none of it may crash an agent, and none of it may lose an acknowledged input.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ateam._jsonl import decode_line
from ateam.agent.state.queue import DEAD_FILE, QUEUE_FILE, DurableQueue
from ateam.bus.codec import pack, unpack
from ateam.bus.connection import RedisTarget
from ateam.bus.keys import Keys
from ateam.bus.ownership import token_digest
from ateam.bus.rpc import Call, Method, RpcClient, RpcServer
from ateam.constants import PROTOCOL_VERSION, RPC_MAX_PAYLOAD
from ateam.errors import BadRequest, Code

# Examples take milliseconds but vary widely (a Redis round trip, an fsync): no deadline.
FAST = settings(max_examples=200, deadline=None)

# --- values ------------------------------------------------------------------------------

_INT64 = st.integers(-(2**63), 2**64 - 1)  # msgpack's whole integer range
_scalars = st.none() | st.booleans() | _INT64 | st.floats(allow_nan=False) | st.text() | st.binary()
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text() | st.binary(), inner, max_size=4)
    ),
    max_leaves=20,
)
_payloads = st.dictionaries(st.text(max_size=8), _values, max_size=5)

# What a peer may put in any field: also NaN and the infinities, which msgpack carries.
_wire_values = _values | st.floats()


_HEADERS = [
    b"\x91",  # fixarray of 1
    b"\x81\xa1k",  # fixmap of 1, key "k"
    b"\xdc\xff\xff",  # array16 of 65535
    b"\xdd\xff\xff\xff\xff",  # array32 of 2**32 - 1
    b"\xde\xff\xff",  # map16
    b"\xdf\xff\xff\xff\xff",  # map32
    b"\xdb\xff\xff\xff\xff",  # str32
    b"\xc6\xff\xff\xff\xff",  # bin32
    b"\xc9\xff\xff\xff\xff\x05",  # ext32
    b"\xd7\xff",  # fixext8 of type -1: a timestamp
]


@st.composite
def _mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` after what a bad link or a bad client does: flips, cuts, splices."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "extend", "splice", "insert"]))
        if kind == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=16))
        elif kind == "splice" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at : at + draw(st.integers(1, 8))] = draw(st.binary(max_size=8))
        elif kind == "insert":
            at = draw(st.integers(0, len(data)))
            # Container and length headers claiming far more than follows.
            data[at:at] = draw(st.sampled_from(_HEADERS))
    return bytes(data)


def _unpack_or_bad_request(data: bytes) -> dict[str, Any] | None:
    """``unpack(data)``, or ``None`` for the one error it may raise; anything else escapes."""
    try:
        value = unpack(data)
    except BadRequest as exc:
        assert exc.code == Code.BAD_REQUEST
        return None
    assert isinstance(value, dict)
    return value


# --- 1. the wire codec -------------------------------------------------------------------


@FAST
@given(payload=_payloads)
def test_codec_round_trips_every_msgpack_value(payload: dict[str, Any]) -> None:
    expected = payload if "v" in payload else {"v": PROTOCOL_VERSION, **payload}
    assert unpack(pack(payload)) == expected


@FAST
@given(data=st.binary(max_size=512) | _payloads.map(pack).flatmap(_mutated))
@example(data=b"")
@example(data=b"\xc1")  # the one byte msgpack never uses
@example(data=b"\x80\x80")  # trailing data
@example(data=b"\x81\x01\x01")  # an integer key
@example(data=b"\x81\xa1\xff\xc0")  # a key that is not UTF-8
def test_codec_unpack_of_any_bytes_is_a_map_or_bad_request(data: bytes) -> None:
    _unpack_or_bad_request(data)


@FAST
@given(
    top=st.sampled_from([b"", b"\x81\xa1k"]),
    header=st.sampled_from(_HEADERS),
    depth=st.integers(0, 5000),
    tail=st.binary(max_size=16),
)
def test_codec_unpack_survives_deep_nesting_and_huge_length_prefixes(
    top: bytes, header: bytes, depth: int, tail: bytes
) -> None:
    # Nesting deeper than the interpreter's stack, or lengths of 2**32 - 1 backed by a
    # few bytes, must be refused like any other bad input, not crash or allocate them.
    _unpack_or_bad_request(top + header * depth + tail)


# --- 2. the RPC envelope -----------------------------------------------------------------

AGENT = "proj/prop"
OWNER = "console:a"
TOKEN = "secret-of-console-a"


@dataclass(repr=False)  # Hypothesis prints the arguments of a failing example
class RpcEnv:
    """A served agent endpoint and what it reported."""

    keys: Keys
    client: aioredis.Redis
    rpc: RpcClient
    bad: list[str] = field(default_factory=list)


@pytest.fixture
async def rpc_env(client: aioredis.Redis, target: RedisTarget) -> AsyncIterator[RpcEnv]:
    keys = Keys(target.namespace)
    env = RpcEnv(keys, client, RpcClient(client, keys, caller="console:probe"))

    async def echo(call: Call) -> Any:
        return {"params": call.params, "caller": call.caller}

    async def add(call: Call) -> Any:
        return len(call.params)

    async def boom(call: Call) -> Any:
        raise RuntimeError("kaput")

    async def current_owner() -> tuple[str, str]:
        return OWNER, token_digest(TOKEN)

    methods = {
        "echo": Method("echo", echo, False, ""),
        "add": Method("add", add, True, ""),
        "boom": Method("boom", boom, False, ""),
    }
    server = RpcServer(
        client,
        keys,
        AGENT,
        methods,
        current_owner=current_owner,
        on_bad_request=lambda refused: env.bad.append(refused.message),
        fold_s=0,  # each example looks for its own refusal: none is folded
    )
    await client.set(keys.alive(AGENT), b"1")
    server.start()
    yield env
    await server.aclose()


_MISSING = object()


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field as a client sends it, as a buggy one does, or not at all."""
    return st.just(_MISSING) | valid | _wire_values


def _future() -> float:
    return time.time() + 600.0


@st.composite
def _envelopes(draw: st.DrawFn) -> bytes:
    """A request body whose fields have random presence, types and values."""
    fields = {
        "v": _field(st.integers(-2, PROTOCOL_VERSION + 2) | st.booleans()),
        "method": _field(st.sampled_from(["echo", "add", "boom", "nope", ""])),
        "params": _field(st.dictionaries(st.text(max_size=4), _values, max_size=3)),
        "caller": _field(st.sampled_from([OWNER, "console:b"])),
        "auth": _field(st.sampled_from([TOKEN, token_digest(TOKEN), ""])),
        "deadline": _field(
            st.builds(_future) | st.sampled_from([0, 0.0, math.nan, math.inf, -math.inf, -1])
        ),
        "id": _field(st.text(max_size=8)),
    }
    request = {name: draw(strategy) for name, strategy in fields.items()}
    request = {name: value for name, value in request.items() if value is not _MISSING}
    request.update(draw(st.dictionaries(st.text(max_size=6), _values, max_size=2)))
    body: bytes = msgpack.packb(request, use_bin_type=True)
    return body


@st.composite
def _deep_fields(draw: st.DrawFn) -> bytes:
    """A usable request with one field nested deeper than the interpreter's stack.

    Built by hand: msgpack's packer refuses to nest that deep, but a peer need not use it.
    """
    parts = {b"method": b"\xa4echo", b"params": b"\x80"}
    name = draw(st.sampled_from([b"v", b"deadline", b"method", b"params", b"caller", b"auth"]))
    # msgpack stops at 1024 levels; the interpreter's repr() at about 1000.
    depth = draw(st.sampled_from([500, 990, 1000, 1023, 1024]) | st.integers(400, 1100))
    parts[name] = b"\x91" * depth + b"\x01"
    body = bytes([0x80 | len(parts)])
    for key, value in parts.items():
        body += bytes([0xA0 | len(key)]) + key + value
    return body


_bodies = (
    st.binary(max_size=256)
    | _envelopes()
    | _envelopes().flatmap(_mutated)
    | _deep_fields()
    | st.integers(1, 64).map(lambda extra: b"\xc4" + b"x" * (RPC_MAX_PAYLOAD + extra))
)


def _expired(body: bytes) -> bool:
    """Whether the server may drop ``body`` unanswered: its caller has stopped waiting."""
    request = _unpack_or_bad_request(body)
    deadline = request.get("deadline") if request is not None else None
    return (
        isinstance(deadline, int | float)
        and not isinstance(deadline, bool)
        and math.isfinite(deadline)
        and deadline != 0
        and deadline < time.time()
    )


def _assert_stable_reply(reply_raw: bytes, rid: str, body: bytes) -> None:
    reply = unpack(reply_raw)
    assert reply["id"] == rid
    if reply["ok"] is True:
        request = unpack(body)
        assert request["method"] in ("echo", "add")
        if request["method"] == "add":
            assert (request.get("caller"), request.get("auth")) == (OWNER, TOKEN)
        return
    assert reply["ok"] is False
    error = reply["error"]
    assert error["code"] in set(Code), error
    assert isinstance(error["message"], str)


@contextlib.contextmanager
def _agent_recursion_limit() -> Iterator[None]:
    """CPython's default recursion limit, which an agent runs under, for the server task.

    Hypothesis raises the limit by 2000 while an example runs, and the server task shares
    this thread: without this, a request that overflows an agent's stack passes here.
    """
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)  # Hypothesis warns if it finds its limit changed


# The fixture is meant to outlive the examples: the property is that one server takes
# them all in turn and is still serving after each.
@settings(FAST, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies, id_kind=st.sampled_from(["id"] * 6 + ["none", "empty", "long"]))
async def test_rpc_every_request_gets_a_stable_reply_and_the_server_survives(
    rpc_env: RpcEnv, body: bytes, id_kind: str
) -> None:
    keys, client = rpc_env.keys, rpc_env.client
    rid = {"id": uuid.uuid4().hex, "empty": "", "long": "x" * 65, "none": ""}[id_kind]
    raw = body.replace(b"\n", b"") if id_kind == "none" else rid.encode() + b"\n" + body
    bad_before = len(rpc_env.bad)
    with _agent_recursion_limit():
        await client.rpush(keys.rpc(AGENT), raw)
        # Requests are served in arrival order, so once this call is answered the reply to
        # the one before it, if any, is in its list; it also shows the server is alive.
        answer = await rpc_env.rpc.call(AGENT, "echo", timeout=5)
    assert answer == {"params": {}, "caller": "console:probe"}

    reply_raw = await client.lpop(keys.reply(AGENT, rid)) if rid else None
    if id_kind != "id":
        assert reply_raw is None
        assert any("without an id" in line for line in rpc_env.bad[bad_before:])
    elif reply_raw is None:
        assert _expired(body), "a request that was still wanted got no reply"
    else:
        assert isinstance(reply_raw, bytes)
        _assert_stable_reply(reply_raw, rid, body)


# --- 3. the queue file -------------------------------------------------------------------


def _fresh_state() -> tempfile.TemporaryDirectory[str]:
    # Not tmp_path: it is shared by all of a test's examples, and each needs an empty one.
    return tempfile.TemporaryDirectory(prefix="ateam-prop-")


def _pending_ids(queue: DurableQueue) -> list[str]:
    return [item.id for item in queue.pending()]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_junk_ops = st.fixed_dictionaries(
    {"op": st.sampled_from(["start", "done", "requeue", "last", "teleport", ""])},
    optional={"id": _json_values, "attempts": _json_values, "last_id": _json_values},
)
_junk_lines = (
    st.binary(max_size=60)
    | st.text(max_size=40).map(str.encode)
    | _json_values.map(json.dumps).map(str.encode)
    | _junk_ops.map(json.dumps).map(str.encode)
).map(lambda line: line.replace(b"\n", b""))  # a junk line ends where the next begins


@st.composite
def _histories(draw: st.DrawFn) -> tuple[list[tuple[str, str]], bool]:
    """Actions on a queue: append a prompt (its text), or take and finish the next item."""
    actions = draw(
        st.lists(
            st.tuples(st.sampled_from(["append", "append", "process"]), st.text(max_size=20)),
            max_size=12,
        )
    )
    # Whether an item is then taken but not finished: the process died working on it.
    return actions, draw(st.booleans())


def _expected_pending(ops: list[tuple[str, str]]) -> tuple[list[str], str | None]:
    """The pending ids (and the one an interrupted run puts back) that ``ops`` leave."""
    pending: list[str] = []
    current: str | None = None
    for op, item_id in ops:
        if op == "add":
            pending.append(item_id)
        elif op == "start":
            pending.remove(item_id)
            current = item_id
        else:
            current = None
    return ([current, *pending] if current else pending), current


def _build(
    queue: DurableQueue, actions: list[tuple[str, str]], dangling: bool
) -> list[tuple[str, str]]:
    """Run ``actions`` on ``queue``; returns the ops written, one per line of the file."""
    ops: list[tuple[str, str]] = []
    for action, text in actions:
        if action == "append":
            ops.append(("add", queue.append(text, source="cli").id))
        elif (item := queue.take()) is not None:
            queue.done(item.id)
            ops += [("start", item.id), ("done", item.id)]
    if dangling and (item := queue.take()) is not None:
        ops.append(("start", item.id))
    return ops


@FAST
@given(
    history=_histories(),
    junk=st.lists(st.tuples(st.integers(0, 100), _junk_lines), max_size=4),
    cut=st.none() | st.floats(0, 1, exclude_max=True),
    tail=st.binary(max_size=80),
)
def test_queue_recovery_keeps_every_intact_item_once_and_in_order(
    history: tuple[list[tuple[str, str]], bool],
    junk: list[tuple[int, bytes]],
    cut: float | None,
    tail: bytes,
) -> None:
    actions, dangling = history
    with _fresh_state() as tmp:
        state = Path(tmp) / "state"
        queue = DurableQueue(state)
        queue.open()
        ops = _build(queue, actions, dangling)
        queue.close()  # what kill -9 leaves: the file as written
        path = state / QUEUE_FILE
        lines = path.read_bytes().splitlines(keepends=True)
        assert len(lines) == len(ops)  # the model below needs one op per line

        # Damage the file the way disks and crashes do. Junk lines go between lines (a
        # junk line never carries an op: decoded, it names no item that exists).
        real_ids = [item_id for _, item_id in ops]  # a list: junk ids need not be hashable
        entries: list[tuple[bytes, tuple[str, str] | None]] = list(zip(lines, ops, strict=True))
        for position, line in junk:
            decoded = decode_line(line)
            assume(decoded is None or decoded.get("id") not in real_ids)
            entries.insert(position % (len(entries) + 1), (line + b"\n", None))
        torn = b""
        if cut is not None and entries:
            # The last line, cut short anywhere before its newline: its op never happened.
            last, _ = entries.pop()
            torn = last[: int(cut * len(last))]
            tail = tail.replace(b"\n", b"")  # else the fragment and tail could form a line
        torn += tail
        path.write_bytes(b"".join(line for line, _ in entries) + torn)
        survived = [op for _, op in entries if op is not None]
        expected, interrupted = _expected_pending(survived)

        reopened = DurableQueue(state)
        report = reopened.open()
        assert _pending_ids(reopened) == expected
        assert report.torn_bytes == len(torn) - (torn.rfind(b"\n") + 1)
        assert report.requeued == ([interrupted] if interrupted else [])
        assert not report.dead
        assert report.skipped <= len(junk) + torn.count(b"\n")

        # A new item after the repair is durable too, and does not disturb the others.
        later = reopened.append("later", source="cli")
        reopened.close()
        third = DurableQueue(state)
        report = third.open()
        assert _pending_ids(third) == [*expected, later.id]
        assert (report.torn_bytes, report.skipped, report.requeued) == (0, 0, [])
        third.close()


_ID_POOL = st.sampled_from(["q-1-000", "q-2-000", "q-2-001", "q-9-fff", "x"])
_optional_item_fields = {
    "priority": st.integers(-3, 3) | _json_values,
    "attempts": st.integers(-1, 3) | _json_values,
    "rid": st.none() | st.text(max_size=4) | _json_values,
    "caller": st.none() | st.text(max_size=4) | _json_values,
    "trace_id": st.none() | st.text(max_size=4) | _json_values,
}
# Adds whose required fields are sound, so that the odd optional ones reach the loader,
# and adds where anything may be odd.
_add_ops = st.fixed_dictionaries(
    {
        "op": st.just("add"),
        "id": _ID_POOL,
        "text": st.text(max_size=8),
        "source": st.just("cli"),
        "enqueued_at": st.floats() | st.integers(),
    },
    optional=_optional_item_fields,
) | st.fixed_dictionaries(
    {
        "op": st.just("add"),
        "id": _ID_POOL | _json_values,
        "text": st.text(max_size=8) | _json_values,
        "source": st.just("cli") | _json_values,
        "enqueued_at": st.floats() | _json_values,
    },
    optional=_optional_item_fields,
)
_state_ops = st.fixed_dictionaries(
    {"op": st.sampled_from(["start", "done", "requeue", "last"]), "id": _ID_POOL},
    optional={
        "attempts": st.integers(-1, 4) | _json_values,
        "last_id": _ID_POOL | _json_values,
        "ok": _json_values,
    },
) | _junk_ops.filter(lambda op: op.get("op") in ("start", "done", "requeue", "last"))
_log_lines = (_add_ops | _state_ops).map(json.dumps).map(str.encode) | _junk_lines


def _file(lines: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A JSON-lines file made of ``lines``, maybe with a torn (unterminated) tail."""
    return st.builds(
        lambda body, tail: b"".join(line + b"\n" for line in body) + tail,
        st.lists(lines.map(lambda line: line.replace(b"\n", b"")), max_size=12),
        st.binary(max_size=40).map(lambda tail: tail.replace(b"\n", b"")),
    )


_dead_entries = st.fixed_dictionaries(
    {"id": _ID_POOL | _json_values}, optional={"text": _json_values, "reason": st.text()}
)


@FAST
@given(
    content=_file(_log_lines) | st.binary(max_size=400),
    dead=st.none() | _file(_dead_entries.map(json.dumps).map(str.encode) | _junk_lines),
)
@example(
    # A foreign line whose rid is not a string: it used to pass as an item, then fail
    # as a dict key with TypeError while loading.
    content=b'{"op":"add","id":"q-1-000","text":"t","source":"s","enqueued_at":1,"rid":[]}\n',
    dead=None,
)
@example(
    # An item that dies a second time while dead.jsonl holds an entry with a list id:
    # the duplicate check used to put the ids in a set, and raised TypeError.
    content=(
        b'{"op":"add","id":"q-1-000","text":"t","source":"s","enqueued_at":1}\n'
        b'{"op":"start","id":"q-1-000","attempts":2}\n'
    ),
    dead=b'{"id":[]}\n',
)
def test_queue_open_of_any_file_recovers_and_stays_durable(
    content: bytes, dead: bytes | None
) -> None:
    with _fresh_state() as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        (state / QUEUE_FILE).write_bytes(content)
        if dead is not None:
            (state / DEAD_FILE).write_bytes(dead)

        # The files are far below the tail-scan limit, so not even StorageError is due.
        queue = DurableQueue(state)
        report = queue.open()
        pending = _pending_ids(queue)
        assert len(set(pending)) == len(pending)
        assert queue.current is None
        assert set(report.requeued) <= set(pending)
        assert not set(report.dead) & set(pending)
        for item in queue.pending():  # what passed the edge is typed as declared
            assert all(isinstance(v, str) for v in (item.id, item.text, item.source))
            assert all(v is None or isinstance(v, str) for v in (item.rid, item.caller))

        later = queue.append("later", source="cli")
        assert later.id not in pending
        queue.close()
        again = DurableQueue(state)
        report = again.open()
        assert [i for i in _pending_ids(again) if i != later.id] == pending
        assert later.id in _pending_ids(again)
        assert (report.torn_bytes, report.skipped, report.requeued, report.dead) == (0, 0, [], [])
        again.close()
