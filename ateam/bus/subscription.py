"""Pub/sub channels, listened to for good: the loop every push-driven part shares.

A subscriber (an agent's team-context feed, its board puller) wants three things from a
channel: to be told of each message, to catch up on what it could not hear whenever it
(re)subscribes, since pub/sub keeps nothing for the absent, and never to go deaf
quietly. :func:`listen_forever` does all three: it subscribes, runs ``on_open`` (the
catch-up), hands every message to ``on_message``, and on any failure but cancellation
logs, backs off and starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as aioredis

from ateam.bus.backoff import CONNECTION_ERRORS, Backoff
from ateam.errors import AteamError

__all__ = ["SOFT_ERRORS", "listen_forever"]

log = logging.getLogger(__name__)

SOFT_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, TimeoutError, AteamError)
"""Failures of a background bus read that cost a moment, never the process."""


async def listen_forever(
    client: aioredis.Redis,
    channels: Sequence[str],
    *,
    on_open: Callable[[], Awaitable[None]],
    on_message: Callable[[Any], Awaitable[None]],
    listening: asyncio.Event,
    what: str,
) -> None:
    """Subscribe to ``channels`` until cancelled; ``listening`` is set while subscribed.

    Args:
        on_open: run after each (re)subscription, before messages: the catch-up.
        on_message: each message's ``data``; a failure in it drops that message only.
        what: names the subscriber in logs.
    """
    backoff = Backoff()
    while True:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*channels)
            await on_open()
            listening.set()
            backoff.reset()
            async for message in pubsub.listen():
                if message.get("type") != "message":
                    continue
                try:
                    await on_message(message["data"])
                except CONNECTION_ERRORS:
                    raise  # the link is gone: resubscribe and catch up
                except Exception as exc:  # anyone may publish: a bad message is dropped
                    log.warning("%s: message dropped: %s", what, exc)
        except asyncio.CancelledError:
            raise
        except SOFT_ERRORS as exc:
            log.warning("%s: subscription lost: %s", what, exc)
        except Exception:  # never go deaf quietly: log, resubscribe
            log.exception("%s: subscription failed", what)
        finally:
            listening.clear()
            with contextlib.suppress(*CONNECTION_ERRORS, RuntimeError):
                await pubsub.aclose()
        await asyncio.sleep(backoff.next_delay())
