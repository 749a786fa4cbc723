"""The model router's decisions (SPEC §7): retry, switch, fail, switch back, pins."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.models.router import Action, ModelRouter, Reason
from ateam.config import AgentConfig, load_project
from ateam.errors import (
    AuthFailed,
    BadRequest,
    ContextTooLong,
    Overloaded,
    ProviderUnavailable,
    RateLimited,
)
from ateam.providers import EchoProvider
from ateam.providers.base import Provider


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def config(tmp_path: Path, **switching: Any) -> AgentConfig:
    root = tmp_path / "proj"
    agent = root / ".ateam" / "agents" / "zeus"
    agent.mkdir(parents=True)
    (root / ".ateam" / "models.yaml").write_text(
        "models:\n"
        "  - {id: a, provider: echo, context_window: 8000,"
        " prices: {input_per_mtok: 2.0, output_per_mtok: 8.0}}\n"
        "  - {id: b, provider: echo, context_window: 4000}\n"
        "  - {id: c, provider: echo, context_window: 100000}\n"
    )
    opts = {"retries": 2, "retry_backoff_s": 0.5, "cooldown_s": 60, **switching}
    body = ", ".join(f"{k}: {v}" for k, v in opts.items())
    (agent / "agent.yaml").write_text(f"model: a\nfallbacks: [b, c]\nswitching: {{{body}}}\n")
    return load_project(root=root).agents["zeus"]


def make(tmp_path: Path, **switching: Any) -> tuple[ModelRouter, Clock]:
    clock = Clock()

    def factory(entry: Any) -> Provider:
        return EchoProvider(entry.id, context_window=entry.context_window)

    return ModelRouter(config(tmp_path, **switching), factory=factory, clock=clock), clock


def rate_limited(after: float | None = None) -> RateLimited:
    return RateLimited("429", provider="openai", model="a", retry_after_s=after)


def test_momentary_failures_are_retried_with_growing_delays_then_switch(tmp_path: Path) -> None:
    router, _ = make(tmp_path)
    first = router.after_failure("a", rate_limited(), 0)
    second = router.after_failure("a", rate_limited(), 1)
    third = router.after_failure("a", rate_limited(), 2)
    assert (first.action, first.delay_s) == (Action.RETRY, 0.5)
    assert (second.action, second.delay_s) == (Action.RETRY, 1.0)
    assert (third.action, third.to, third.reason) == (Action.SWITCH, "b", Reason.RATE_LIMITED)


def test_retry_after_is_honoured_up_to_a_cap(tmp_path: Path) -> None:
    router, _ = make(tmp_path)
    assert router.after_failure("a", rate_limited(3.0), 0).delay_s == 3.0
    assert router.after_failure("a", rate_limited(3600.0), 0).delay_s == 10.0


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (Overloaded("529", status=529), Reason.OVERLOADED),
        (ProviderUnavailable("refused"), Reason.UNAVAILABLE),
        (rate_limited(), Reason.RATE_LIMITED),
    ],
)
def test_each_failure_kind_names_its_reason(tmp_path: Path, error: Any, reason: Reason) -> None:
    router, _ = make(tmp_path, retries=0)
    decision = router.after_failure("a", error, 0)
    assert (decision.action, decision.reason) == (Action.SWITCH, reason)


def test_auth_and_other_errors_fail_without_switching(tmp_path: Path) -> None:
    router, _ = make(tmp_path, retries=0)
    assert router.after_failure("a", AuthFailed("bad key"), 0).action is Action.FAIL


def test_a_context_length_error_goes_to_a_larger_window_at_once(tmp_path: Path) -> None:
    router, _ = make(tmp_path)
    decision = router.after_failure("a", ContextTooLong("too long"), 0)
    # b's 4 000 tokens are smaller than a's 8 000: only c can help.
    assert (decision.action, decision.to, decision.reason) == (
        Action.SWITCH,
        "c",
        Reason.CONTEXT_LENGTH,
    )


def test_a_cooling_model_is_skipped_and_nowhere_to_go_fails(tmp_path: Path) -> None:
    router, clock = make(tmp_path, retries=0)
    assert router.after_failure("a", rate_limited(), 0).to == "b"
    router.switch("b")
    assert router.after_failure("b", rate_limited(), 0).to == "c"  # a is cooling down
    router.switch("c")
    assert router.after_failure("c", rate_limited(), 0).action is Action.FAIL
    clock.now += 61
    assert router.after_failure("c", rate_limited(), 0).to == "a"  # rested


def test_pinned_never_switches(tmp_path: Path) -> None:
    router, _ = make(tmp_path, retries=0)
    router.pin("a")
    assert router.after_failure("a", rate_limited(), 0).action is Action.FAIL
    assert router.headroom_low(0.0) is None
    with pytest.raises(BadRequest, match="unknown model"):
        router.pin("zzz")


def test_low_headroom_moves_on_before_a_429(tmp_path: Path) -> None:
    router, _ = make(tmp_path, headroom_min=0.1)
    assert router.headroom_low(0.5) is None
    decision = router.headroom_low(0.02)
    assert decision is not None and (decision.to, decision.reason) == ("b", Reason.HEADROOM)


def test_switch_back_needs_idle_rest_cooldown_and_room(tmp_path: Path) -> None:
    router, clock = make(tmp_path, retries=0, switch_back=0.5)
    router.after_failure("a", rate_limited(), 0)
    router.switch("b")
    assert not router.wants_switch_back(context_tokens=10)  # a still cooling down
    clock.now += 61
    assert router.wants_switch_back(context_tokens=10)
    assert not router.wants_switch_back(context_tokens=4500)  # over half of a's 8 000
    router.pin("b")
    assert not router.wants_switch_back(context_tokens=10)


async def test_a_failed_probe_keeps_the_fallback_and_rests_the_primary(tmp_path: Path) -> None:
    router, clock = make(tmp_path)

    class Down(EchoProvider):
        async def stream(self, messages: Any, *, tools: Any = None) -> Any:  # type: ignore[override]
            raise ProviderUnavailable("still down")
            yield  # pragma: no cover

    router.providers["a"] = Down("a")
    assert await router.probe("a") is False
    assert router.health_of("a").cooling_until > clock.now
    router.providers["a"] = EchoProvider("a")
    clock.now += 61
    assert await router.probe("a") is True
    assert router.health_of("a").failures == 0


def test_usage_and_cost_are_counted_per_model(tmp_path: Path) -> None:
    router, _ = make(tmp_path)
    router.record_success("a", 1_000_000, 500_000)
    router.record_success("b", 10, 5)
    view = router.usage_view()
    assert view["per_model"]["a"] == {
        "tokens_in": 1_000_000,
        "tokens_out": 500_000,
        "calls": 1,
        "cost": 6.0,  # 1 M in at 2.0 + 0.5 M out at 8.0
    }
    assert view["tokens_in"] == 1_000_010 and view["calls"] == 2
    rows = {row["id"]: row for row in router.models_view()}
    assert rows["a"]["current"] and rows["a"]["route"] == 0 and rows["c"]["route"] == 2


def test_the_route_is_primary_then_fallbacks_once(tmp_path: Path) -> None:
    router, _ = make(tmp_path)
    assert router.route == ["a", "b", "c"]
    cfg = dataclasses.replace(router.config)
    assert cfg.fallbacks == ("b", "c")
