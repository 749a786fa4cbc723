"""A stopped agent's mailbox (issue 26): bounded, in order, taken out only once queued."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from ateam.agent.loop.task import TaskOutcome
from ateam.agent.runtime.inbox import MailboxIntake, team_input_text
from ateam.agent.runtime.replies import REPLY_MAX_BYTES, Replier, reply_text
from ateam.agent.state.queue_item import QueueItem
from ateam.bus.connection import RedisTarget
from ateam.bus.identity import AgentIdentity
from ateam.bus.keys import Keys
from ateam.bus.mailbox import Mailbox, MailMessage
from ateam.bus.messenger import TeamMessenger
from ateam.constants import RPC_MAX_PAYLOAD
from ateam.errors import AgentNotFound, BadRequest, Code, MailboxFull, PayloadTooLarge

HERA = "t/hera"


def mailbox(client: aioredis.Redis, target: RedisTarget, **limits: int) -> Mailbox:
    return Mailbox(client, Keys(target.namespace), **limits)


async def test_a_full_mailbox_refuses_with_its_code_and_keeps_nothing_more(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    box = mailbox(client, target, max_messages=2, max_bytes=10_000)
    assert await box.put(HERA, MailMessage.new("one", "cli")) == 1
    assert await box.put(HERA, MailMessage.new("two", "cli")) == 2
    with pytest.raises(MailboxFull) as refused:
        await box.put(HERA, MailMessage.new("three", "cli"))
    assert refused.value.code == Code.MAILBOX_FULL == "mailbox.full"
    assert "2 messages" in refused.value.message
    assert [m.text for m in await box.messages(HERA)] == ["one", "two"]


async def test_the_byte_cap_refuses_too_and_is_given_back_as_messages_leave(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    box = mailbox(client, target, max_messages=100, max_bytes=400)
    big = MailMessage.new("x" * 200, "cli")
    await box.put(HERA, big)
    with pytest.raises(MailboxFull, match="400 bytes"):
        await box.put(HERA, MailMessage.new("y" * 200, "cli"))
    head = await box.head(HERA)
    assert head is not None and await box.remove(HERA, head)
    assert await box.put(HERA, MailMessage.new("y" * 200, "cli")) == 1


async def test_only_the_head_as_read_is_removed(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    box = mailbox(client, target)
    first, second = MailMessage.new("a", "cli"), MailMessage.new("b", "cli")
    await box.put(HERA, first)
    await box.put(HERA, second)
    assert not await box.remove(HERA, second.encode())  # not the head: left alone
    assert await box.remove(HERA, first.encode())
    assert [m.id for m in await box.messages(HERA)] == [second.id]


async def test_known_means_started_here_or_already_waited_for(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    box = mailbox(client, target)
    assert not await box.known(HERA)
    await box.mark_known(HERA)
    assert await box.known(HERA)
    assert not await box.known("t/ares")
    await box.put("t/ares", MailMessage.new("kept by a person", "cli"))
    assert await box.known("t/ares")


def test_a_message_decodes_or_says_why_not() -> None:
    message = MailMessage.new("hi", "agent:zeus", hops=2, reply_to="t/zeus")
    assert MailMessage.decode(message.encode()) == message
    assert message.rid == message.id  # no request id given: the message's own
    for junk in (b"not json", b"[1]", b'{"id": 1, "rid": "r", "text": "t"}'):
        with pytest.raises(ValueError, match="not a mailbox message"):
            MailMessage.decode(junk)


async def test_a_send_to_a_stopped_teammate_is_kept_and_to_a_stranger_refused(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    keys = Keys(target.namespace)
    box = Mailbox(client, keys)
    await box.mark_known(HERA)
    zeus = TeamMessenger(client, keys, AgentIdentity("t/zeus"), max_hops=4)
    sent = await zeus.send("hera", "please", hops=1, trace_id="tr", reply=True)
    assert sent["mailbox"] is True and sent["note"] == "queued for hera (not running)"
    (kept,) = await box.messages(HERA)
    assert (kept.text, kept.source, kept.hops, kept.trace_id) == ("please", "agent:zeus", 1, "tr")
    assert kept.reply_to == "t/zeus" and kept.caller == "agent:t/zeus"
    with pytest.raises(AgentNotFound):
        await zeus.send("nobody", "hello?", hops=1, trace_id=None)

    # An answer's request id comes from the answered item: sent twice, it is one request.
    hera = TeamMessenger(client, keys, AgentIdentity(HERA), max_hops=1)
    await box.mark_known("t/zeus")
    for _ in range(2):
        await hera.answer("t/zeus", "42", hops=5, trace_id="tr", item_id="q-1-000")
    answers = await box.messages("t/zeus")
    assert {a.rid for a in answers} == {f"reply-{HERA}-q-1-000"}
    assert answers[0].in_reply_to == "q-1-000" and answers[0].reply_to is None


class Intake:
    """The agent's queue as the intake sees it: request ids are queued once."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def enqueue(self, text: str, **fields: Any) -> Any:
        seen = [i for i in self.items if i["rid"] == fields["rid"]]
        if not seen:
            self.items.append({"text": text, **fields})

        class Queued:
            created = not seen
            item = QueueItem("q-1-000", text, fields["source"], 0.0)

        return Queued()


class Events:
    def __init__(self) -> None:
        self.emitted: list[dict[str, Any]] = []

    def emit(self, type: Any, **data: Any) -> None:
        self.emitted.append(data)


async def test_the_intake_queues_in_order_once_and_drops_what_it_must(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    box = mailbox(client, target)
    intake, events = Intake(), Events()
    taker = MailboxIntake(box, HERA, intake, events, max_hops=lambda: 2)  # type: ignore[arg-type]
    first = MailMessage.new("first", "agent:zeus", hops=1, trace_id="tr", reply_to="t/zeus")
    messages = [
        first,
        MailMessage.new("too far", "agent:zeus", hops=3),
        MailMessage.new("42", "agent:zeus", hops=9, in_reply_to="q-5-000"),
        MailMessage.new("from a person", "cli"),
    ]
    for message in messages:
        await box.put(HERA, message)
    await client.rpush(Keys(target.namespace).mailbox(HERA), b"garbage")
    assert await taker.deliver() == 5
    assert [i["text"] for i in intake.items] == [
        "[from teammate zeus, through team.send]\nfirst",
        "[reply from teammate zeus to your team.send q-5-000]\n42",
        "from a person",
    ]
    assert [i["hops"] for i in intake.items] == [1, 2, 0]  # a reply is kept within the limit
    assert [i["reply_to"] for i in intake.items] == ["t/zeus", None, None]
    assert [e["code"] for e in events.emitted] == ["mailbox.dropped"] * 2
    assert await box.length(HERA) == 0

    # The kill -9 case: queued, not yet removed; the next start finds it first again.
    await box.put(HERA, first)
    assert await taker.deliver() == 1
    assert len(intake.items) == 3


async def test_a_kept_message_names_its_asker_only_within_the_project(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    # A mailbox entry is data: its reply_to must not send this agent's answer elsewhere.
    box = mailbox(client, target)
    intake, events = Intake(), Events()
    taker = MailboxIntake(box, HERA, intake, events, max_hops=lambda: 4)  # type: ignore[arg-type]
    await box.put(HERA, MailMessage.new("a", "agent:zeus", hops=1, reply_to="other/x"))
    await box.put(HERA, MailMessage.new("b", "agent:../bad", hops=1, reply_to="t/../bad"))
    await box.put(HERA, MailMessage.new("c", "cli", reply_to="t/zeus"))
    assert await taker.deliver() == 3
    assert [i["reply_to"] for i in intake.items] == ["t/zeus", None, None]


async def test_a_message_larger_than_a_request_is_not_kept(
    client: aioredis.Redis, target: RedisTarget
) -> None:
    box = mailbox(client, target)
    with pytest.raises(PayloadTooLarge) as refused:
        await box.put(HERA, MailMessage.new("x" * (RPC_MAX_PAYLOAD + 1), "cli"))
    assert refused.value.code == "payload.too_large"
    assert await box.length(HERA) == 0


def test_a_long_answer_is_clipped_to_what_a_message_carries() -> None:
    answer = "é" * REPLY_MAX_BYTES  # two bytes each: clipped on a character boundary
    text = reply_text(TaskOutcome(True, None, answer, 0, 0))
    head, _, note = text.rpartition("\n")
    assert head == "é" * (REPLY_MAX_BYTES // 2)
    assert note == f"[reply clipped: {REPLY_MAX_BYTES} more bytes in my history]"


class Running:
    """What the Replier reads of the agent's status: not stopping."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()


class Refusing:
    """A messenger whose every answer meets an error: the Replier's own collaborator."""

    def __init__(self, error: Exception) -> None:
        self.error, self.calls = error, 0

    async def answer(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        raise self.error


async def test_a_reply_the_acl_refuses_is_told_and_does_not_hold_the_worker() -> None:
    status, events = Running(), Events()
    for error, code in [
        (NoPermissionError("NOPERM this user has no permissions"), "redis.noperm"),
        (BadRequest("to: 'other/x' is in project 'other'"), "bad_request"),
    ]:
        messenger = Refusing(error)
        replier = Replier(messenger, status, events, lambda text: text)  # type: ignore[arg-type]
        item = QueueItem("q-1-000", "t", "agent:zeus", 0.0, reply_to="t/zeus")
        async with asyncio.timeout(5):
            assert await replier.answer_back(item, TaskOutcome(True, None, "42", 0, 0))
        assert messenger.calls == 1
        assert events.emitted[-1]["code"] == code


def test_what_the_asker_reads() -> None:
    assert reply_text(TaskOutcome(True, None, "42", 0, 0)) == "42"
    failed = TaskOutcome(False, "provider.auth: bad key", "", 0, 0)
    assert reply_text(failed) == "(the task failed: provider.auth: bad key)"
    assert team_input_text("mcp", "cursor", "hi", in_reply_to=None).startswith("[from cursor")


def test_a_queue_item_keeps_its_asker_only_when_there_is_one() -> None:
    plain = QueueItem("q-1-000", "t", "cli", 0.0)
    assert "reply_to" not in plain.to_dict()
    asked = QueueItem("q-1-001", "t", "agent:zeus", 0.0, reply_to="t/zeus")
    assert QueueItem.from_dict(asked.to_dict()).reply_to == "t/zeus"
    with pytest.raises(ValueError, match="reply_to"):
        QueueItem.from_dict({**asked.to_dict(), "reply_to": 3})
