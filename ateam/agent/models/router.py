"""Which model an agent talks to, and when it changes (SPEC §7 routing and switching).

The router owns one provider per model id of the agent's route — ``model`` (the
primary) then ``fallbacks`` in order — built on first use, so a fallback whose SDK or key
is missing costs nothing until it is needed. It decides, for each failed model call:

* **retry** the same model, for failures that are often momentary (429, 529/503, other
  5xx, connection errors), at most ``switching.retries`` times with a growing delay that
  honours the provider's ``Retry-After`` up to a cap;
* **switch** to the next fallback once the retries are spent, at once for a
  context-length error the caller could not fix by summarising, or when the provider's
  rate-limit headroom falls under ``switching.headroom_min``;
* **fail** the call when there is nowhere to go (no healthy fallback, or pinned).

A model that failed is *cooling down* for ``switching.cooldown_s``: it is skipped as a
fallback and not switched back to. Switching back to the primary happens only when the
agent is idle, nothing is pinned, the cooldown is over, the context would fill less than
``switch_back`` of the primary's window, and a small probe call to the primary succeeds
— so an agent is never left on its fallback for ever, and never bounced back onto a
model that is still failing.

``/use MODEL`` pins a model: no automatic switch happens while pinned, whatever fails.
The router is pure bookkeeping plus the probe; the task runner acts on its decisions and
the agent publishes them (``model.switch`` events, the handoff's model history).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from ateam._json import JsonObject
from ateam.agent.state.usage import Usage
from ateam.config import AgentConfig
from ateam.config.schema import ModelEntry, SwitchingSpec
from ateam.errors import (
    AteamError,
    BadRequest,
    ContextTooLong,
    Overloaded,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
)
from ateam.providers.base import Message, Provider, TextDelta

PROBE_TIMEOUT_S = 15.0
RETRY_AFTER_CAP_S = 10.0


class Reason(StrEnum):
    """Why the agent moved to another model (the ``reason`` of ``model.switch``)."""

    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    UNAVAILABLE = "unavailable"
    CONTEXT_LENGTH = "context_length"
    CONTEXT_FULL = "context_full"
    HEADROOM = "rate_limit_headroom"
    SWITCH_BACK = "switch_back"
    PINNED = "pinned"
    INCOMPLETE_HANDOFF = "incomplete_handoff"


# Failure type → the reason a switch after it reports; a table so the retryable set and
# the reasons stay in one place.
_RETRYABLE: dict[type[ProviderError], Reason] = {
    RateLimited: Reason.RATE_LIMITED,
    Overloaded: Reason.OVERLOADED,
    ProviderUnavailable: Reason.UNAVAILABLE,
}


class Action(StrEnum):
    RETRY = "retry"
    SWITCH = "switch"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    """What to do after a model call failed: retry, switch or give up."""

    action: Action
    delay_s: float = 0.0
    """How long to wait before a retry."""
    to: str | None = None
    """The model to switch to."""
    reason: Reason | None = None


@dataclass
class Health:
    """What the router knows about one model."""

    failures: int = 0
    """Consecutive failed calls."""
    last_error: str | None = None
    last_failure: float | None = None
    last_ok: float | None = None
    cooling_until: float = 0.0

    def to_wire(self, now: float) -> JsonObject:
        return {
            "failures": self.failures,
            "last_error": self.last_error,
            "cooling_down_s": round(max(0.0, self.cooling_until - now), 1),
            "healthy": self.failures == 0 and self.cooling_until <= now,
        }


@dataclass(eq=False)
class ModelRouter:
    """The route of one agent and the state of each model on it.

    Args:
        config: the agent's configuration (route, thresholds, model registry).
        factory: builds a provider for a model entry (``build_provider``; tests may
            pass their own).
        clock: monotonic seconds.
    """

    config: AgentConfig
    factory: Callable[[ModelEntry], Provider]
    clock: Callable[[], float] = time.monotonic
    current: str = ""
    pinned: str | None = None
    providers: dict[str, Provider] = field(default_factory=dict)
    health: dict[str, Health] = field(default_factory=dict)
    usage: dict[str, Usage] = field(default_factory=dict)
    last_switch: float | None = None
    on_usage: Callable[[], None] | None = None
    """Told after each counted call, so the counts can be persisted (``usage.json``)."""

    def __post_init__(self) -> None:
        self.current = self.current or self.config.model

    # the route ------------------------------------------------------------------------

    @property
    def primary(self) -> str:
        return self.config.model

    @property
    def route(self) -> list[str]:
        """Primary, then fallbacks, each once."""
        seen: list[str] = []
        for model in (self.primary, *self.config.fallbacks):
            if model not in seen:
                seen.append(model)
        return seen

    @property
    def switching(self) -> SwitchingSpec:
        return self.config.spec.switching

    def provider(self, model: str | None = None) -> Provider:
        """The provider of ``model`` (default: the current one), built on first use."""
        name = model or self.current
        found = self.providers.get(name)
        if found is None:
            found = self.factory(self.config.model_entry(name))
            self.providers[name] = found
        return found

    def health_of(self, model: str) -> Health:
        return self.health.setdefault(model, Health())

    def usage_of(self, model: str) -> Usage:
        return self.usage.setdefault(model, Usage())

    # outcomes of calls ----------------------------------------------------------------

    def record_success(self, model: str, tokens_in: int, tokens_out: int) -> None:
        health = self.health_of(model)
        health.failures = 0
        health.last_ok = self.clock()
        usage = self.usage_of(model)
        usage.tokens_in += tokens_in
        usage.tokens_out += tokens_out
        usage.calls += 1
        entry = self.config.models.get(model)
        prices = entry.prices if entry is not None else None
        if prices is not None:
            usage.cost += (
                tokens_in * prices.input_per_mtok + tokens_out * prices.output_per_mtok
            ) / 1e6
        if self.on_usage is not None:
            self.on_usage()

    def add_cost(self, model: str, amount: float) -> None:
        """Cost a model reported itself (a coding agent's running total), on top of prices."""
        self.usage_of(model).cost += amount
        if self.on_usage is not None:
            self.on_usage()

    def is_runtime(self, model: str | None = None) -> bool:
        """Whether ``model`` (default: the current one) is a coding agent over ACP."""
        entry = self.config.models.get(model or self.current)
        return entry is not None and entry.is_runtime

    def after_failure(self, model: str, exc: BaseException, attempt: int) -> Decision:
        """What to do after call number ``attempt`` (0-based) to ``model`` failed."""
        now = self.clock()
        health = self.health_of(model)
        health.failures += 1
        health.last_failure = now
        health.last_error = exc.message if isinstance(exc, ProviderError) else repr(exc)
        reason = _reason_for(exc)
        if reason is None:
            return Decision(Action.FAIL)
        if reason is not Reason.CONTEXT_LENGTH and attempt < self.switching.retries:
            return Decision(Action.RETRY, delay_s=self._retry_delay(exc, attempt))
        # Retries spent (or no point retrying): this model rests for the cool-down.
        health.cooling_until = now + self.switching.cooldown_s
        target = self._fallback_for(model, larger_than=_window(self, model, reason))
        if target is None or self.pinned is not None:
            return Decision(Action.FAIL, reason=reason)
        return Decision(Action.SWITCH, to=target, reason=reason)

    def headroom_low(self, fraction: float) -> Decision | None:
        """A switch decision when the provider says its rate limit is nearly spent."""
        if fraction >= self.switching.headroom_min or self.pinned is not None:
            return None
        self.health_of(self.current).cooling_until = self.clock() + self.switching.cooldown_s
        target = self._fallback_for(self.current)
        return (
            None if target is None else Decision(Action.SWITCH, to=target, reason=Reason.HEADROOM)
        )

    def larger_fallback(self, model: str, window: int) -> str | None:
        """A model of the route with a window larger than ``window``, if one is healthy."""
        return None if self.pinned is not None else self._fallback_for(model, larger_than=window)

    def _retry_delay(self, exc: BaseException, attempt: int) -> float:
        delay: float = self.switching.retry_backoff_s * (2**attempt)
        after = getattr(exc, "retry_after_s", None)
        if isinstance(after, int | float) and after > 0:
            delay = max(delay, min(float(after), RETRY_AFTER_CAP_S))
        return delay

    def _fallback_for(self, model: str, *, larger_than: int | None = None) -> str | None:
        """The first model of the route after ``model`` that is not cooling down."""
        now = self.clock()
        route = self.route
        start = route.index(model) + 1 if model in route else 0
        for candidate in route[start:] + route[:start]:
            if candidate == model or self.health_of(candidate).cooling_until > now:
                continue
            if larger_than is not None:
                if self.config.model_entry(candidate).context_window <= larger_than:
                    continue
            if not self._buildable(candidate):
                continue
            return candidate
        return None

    def _buildable(self, model: str) -> bool:
        """Build the provider now: a fallback whose SDK or settings are broken is skipped
        (and rests) instead of failing the first call after the switch."""
        try:
            self.provider(model)
        except AteamError as exc:
            health = self.health_of(model)
            health.failures += 1
            health.last_error = exc.message
            health.cooling_until = self.clock() + self.switching.cooldown_s
            return False
        return True

    # switching ------------------------------------------------------------------------

    def switch(self, to: str) -> str:
        """Make ``to`` the current model; returns the previous one."""
        self.config.model_entry(to)  # ConfigError for an unknown model, before any change
        previous, self.current = self.current, to
        self.last_switch = self.clock()
        return previous

    def pin(self, model: str | None) -> str:
        """``/use MODEL``: pin (and switch to) ``model``; ``None`` unpins. Returns the previous."""
        if model is None:
            self.pinned = None
            return self.current
        if model not in self.config.models:
            known = ", ".join(sorted(self.config.models))
            raise BadRequest(f"unknown model {model!r} (known: {known})")
        self.pinned = model
        return self.switch(model) if model != self.current else self.current

    def wants_switch_back(self, *, context_tokens: int) -> bool:
        """Idle-time check: should the agent return to its primary now?"""
        return self.switch_back_blocker(context_tokens=context_tokens) is None

    def switch_back_blocker(self, *, context_tokens: int) -> str | None:
        """Why the agent cannot return to its primary now (``None``: it can).

        ``"context"`` means only the context's size stands in the way — the one blocker
        the agent can remove itself, by summarising.
        """
        if self.current == self.primary:
            return "on the primary"
        if self.pinned is not None:
            return "pinned"
        now = self.clock()
        if self.health_of(self.primary).cooling_until > now:
            return "primary resting"
        if self.last_switch is not None and now - self.last_switch < self.switching.cooldown_s:
            return "cool-down"
        window = self.config.model_entry(self.primary).context_window
        if context_tokens >= self.switching.switch_back * window:
            return "context"
        return None

    async def probe(self, model: str) -> bool:
        """A one-word call to ``model``: does it answer at all right now?"""
        if not self._buildable(model):
            return False
        provider = self.provider(model)
        messages = [
            Message("system", "Health check: answer with one word."),
            Message("user", "ping"),
        ]
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                async for chunk in provider.stream(messages):
                    if isinstance(chunk, TextDelta):
                        break
        except (ProviderError, TimeoutError) as exc:
            health = self.health_of(model)
            health.failures += 1
            health.last_error = exc.message if isinstance(exc, ProviderError) else "timed out"
            health.cooling_until = self.clock() + self.switching.cooldown_s
            return False
        health = self.health_of(model)
        health.failures = 0
        health.last_ok = self.clock()
        return True

    # views ----------------------------------------------------------------------------

    def models_view(self) -> list[JsonObject]:
        """Every model the agent knows, with its place on the route and its health."""
        now = self.clock()
        route = self.route
        rows = []
        for model_id, entry in sorted(self.config.models.items()):
            rows.append(
                {
                    "id": model_id,
                    "provider": str(entry.provider),
                    "context_window": entry.context_window,
                    "route": route.index(model_id) if model_id in route else None,
                    "current": model_id == self.current,
                    "pinned": model_id == self.pinned,
                    **self.health_of(model_id).to_wire(now),
                    **self.usage_of(model_id).to_wire(),
                }
            )
        return rows

    def usage_view(self) -> JsonObject:
        totals = Usage()
        for item in self.usage.values():
            totals.tokens_in += item.tokens_in
            totals.tokens_out += item.tokens_out
            totals.calls += item.calls
            totals.cost += item.cost
        return {
            "per_model": {name: item.to_wire() for name, item in sorted(self.usage.items())},
            **totals.to_wire(),
        }


def _reason_for(exc: BaseException) -> Reason | None:
    if isinstance(exc, ContextTooLong):
        return Reason.CONTEXT_LENGTH
    for kind, reason in _RETRYABLE.items():
        if isinstance(exc, kind):
            return reason
    return None


def _window(router: ModelRouter, model: str, reason: Reason) -> int | None:
    # After a context-length error only a model with a larger window can help.
    if reason is not Reason.CONTEXT_LENGTH:
        return None
    return router.config.model_entry(model).context_window
