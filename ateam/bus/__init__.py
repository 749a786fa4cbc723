"""The Redis bus: connection, codec, registry, lock, ownership, RPC and event stream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ateam._lazy import exports

if TYPE_CHECKING:
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

# Loaded at first use (ateam._lazy): a verb pays only for the modules of the names
# it uses.
_LAZY = {
    "ateam.bus.coalesce": ("Coalescer",),
    "ateam.bus.connection": ("RedisTarget", "make_client", "resolve_target"),
    "ateam.bus.events": ("Event", "EventType", "Gap"),
    "ateam.bus.keys": ("Keys",),
    "ateam.bus.lock": ("InstanceLock",),
    "ateam.bus.ownership": ("Ownership",),
    "ateam.bus.publisher": ("EventPublisher",),
    "ateam.bus.registry": ("Heartbeat", "Registry"),
    "ateam.bus.rpc": ("Call", "Method", "RpcClient", "RpcServer"),
    "ateam.bus.tail": ("EventTail",),
}
__getattr__, __dir__ = exports(__name__, _LAZY)

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
