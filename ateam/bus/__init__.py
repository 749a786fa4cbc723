"""The Redis bus: connection, codec, registry, lock, ownership, RPC and event stream."""

from __future__ import annotations

from ateam.bus.coalesce import Coalescer
from ateam.bus.connection import RedisTarget, make_client, resolve_target
from ateam.bus.events import Event, EventType, Gap
from ateam.bus.keys import Keys
from ateam.bus.lock import InstanceLock
from ateam.bus.ownership import Ownership
from ateam.bus.publisher import EventPublisher
from ateam.bus.registry import Heartbeat, Registry
from ateam.bus.rpc import Call, Method, RpcClient, RpcServer
from ateam.bus.tail import EventTail

__all__ = [
    "Call",
    "Coalescer",
    "Event",
    "EventPublisher",
    "EventTail",
    "EventType",
    "Gap",
    "Heartbeat",
    "InstanceLock",
    "Keys",
    "Method",
    "Ownership",
    "RedisTarget",
    "Registry",
    "RpcClient",
    "RpcServer",
    "make_client",
    "resolve_target",
]
