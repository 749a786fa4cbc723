"""The stall watch: a silent step is alerted, cancelled on request, and never misread."""

from __future__ import annotations

import asyncio

import pytest

from ateam.agent.loop.watchdog import Stall, StallWatch
from ateam.errors import WorkerStalled


class Probe:
    """What the watch reports, and a progress counter the test moves."""

    def __init__(self) -> None:
        self.mark = 0
        self.paused = False
        self.alerts: list[Stall] = []
        self.cleared = 0
        self.alerted = asyncio.Event()

    def alert(self, stall: Stall) -> None:
        self.alerts.append(stall)
        self.alerted.set()

    def clear(self) -> None:
        self.cleared += 1

    def watch(self, *, stall_after_s: float = 0.2, cancel_after_s: float = 0.0) -> StallWatch:
        watch = StallWatch(
            progress=lambda: self.mark,
            paused=lambda: self.paused,
            alert=self.alert,
            clear=self.clear,
            stall_after_s=stall_after_s,
            cancel_after_s=cancel_after_s,
        )
        watch.start()
        return watch


async def test_a_silent_step_is_alerted_and_cleared_when_it_ends() -> None:
    probe = Probe()
    watch = probe.watch()
    release = asyncio.Event()

    async def silent() -> str:
        await release.wait()
        return "done"

    step = asyncio.create_task(watch.step("summary", silent()))
    await asyncio.wait_for(probe.alerted.wait(), 5)
    assert watch.current == "summary"
    (stall,) = probe.alerts
    assert stall.step == "summary" and not stall.cancelling and stall.idle_s >= 0.2
    assert "no progress" in stall.message() and "summary" in stall.message()
    release.set()
    assert await step == "done"
    assert probe.cleared == 1 and watch.current is None
    await watch.aclose()


async def test_a_step_that_keeps_moving_is_never_alerted() -> None:
    probe = Probe()
    watch = probe.watch(stall_after_s=0.2, cancel_after_s=0.4)

    async def busy() -> int:
        for _ in range(30):  # ~0.9 s in all, far past both limits
            probe.mark += 1
            await asyncio.sleep(0.03)
        return probe.mark

    assert await watch.step("task q-1", busy()) == 30
    assert probe.alerts == []
    await watch.aclose()


async def test_waiting_for_a_person_is_not_a_stall() -> None:
    probe = Probe()
    probe.paused = True
    watch = probe.watch(stall_after_s=0.1, cancel_after_s=0.2)
    assert await watch.step("task q-2", asyncio.sleep(0.6, "answered")) == "answered"
    assert probe.alerts == []
    await watch.aclose()


async def test_a_silent_step_without_a_stop_is_cancelled_after_cancel_after_s() -> None:
    probe = Probe()
    watch = probe.watch(stall_after_s=0.1, cancel_after_s=0.3)
    cancelled = asyncio.Event()

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(WorkerStalled) as caught:
        await asyncio.wait_for(watch.step("compaction", hangs()), 10)
    assert caught.value.code == "worker.stalled" and "compaction" in caught.value.message
    assert cancelled.is_set()
    assert [s.cancelling for s in probe.alerts] == [False, True]
    await watch.aclose()


async def test_the_cooperative_stop_is_used_first() -> None:
    probe = Probe()
    watch = probe.watch(stall_after_s=0.1, cancel_after_s=0.2)
    stopped = asyncio.Event()

    async def task() -> str:
        await stopped.wait()
        return "ended by its stop"

    result = await asyncio.wait_for(watch.step("task q-3", task(), stop=stopped.set), 10)
    assert result == "ended by its stop"
    assert probe.alerts[-1].cancelling
    await watch.aclose()


async def test_cancelling_the_worker_cancels_the_step_not_the_watch() -> None:
    probe = Probe()
    watch = probe.watch(stall_after_s=5)
    inner_cancelled = asyncio.Event()

    async def long() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            inner_cancelled.set()
            raise

    worker = asyncio.create_task(watch.step("task q-4", long()))
    await asyncio.sleep(0.05)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    assert inner_cancelled.is_set() and probe.alerts == []
    await watch.aclose()
