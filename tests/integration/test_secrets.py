"""Secrets are redacted at the door (issue 10, SPEC §11): nothing ateam keeps holds one.

A user types secrets into a task, the agent works on it, ``/handoff`` is shown and the
agent is restarted; then every file under the project's ``.ateam/``, every file under
ateam's home (the embedded Redis server's append-only file and logs included) and every
Redis key of every type are read back, and none holds a raw secret.
"""

from __future__ import annotations

import base64
import itertools
import random
import shutil
import string
from pathlib import Path
from typing import Any

import pytest
import redis

from ateam.bus.embedded import socket_name
from ateam.bus.events import decode_chunk
from ateam.redact import Redactor
from tests._wait import wait_for

from .conftest import (
    AgentFactory,
    Bus,
    embedded_ps,
    history_turns,
    run_ateam,
    subprocess_env,
    write_scripted_project,
)

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello"

SECRETS = {
    "openai": "sk-proj-" + "Q7wE9rT1yU3iO5pA2sD4fG6h" * 2,
    "anthropic": "sk-ant-api03-" + "Lk8Jh6Gf4Ds2Aq1Zx3Cv5Bn7" * 2,
    "aws": "AKIA" + "Z7Q2W9E4R1T6Y3U8",
    "github": "ghp_" + "m4N8b2V6c0X5z9L3k7J1h5G9f3D7s1A4q8W2",
    "password": "Tr0ub4dor3xyzQ8",
}
TASK = (
    f"deploy with key {SECRETS['openai']}, fall back to {SECRETS['anthropic']}, "
    f"upload as {SECRETS['aws']}, push with {SECRETS['github']} "
    f"and log in with password={SECRETS['password']}"
)


def embedded_client(home: Path, runtime: str) -> redis.Redis:
    password = (home / "redis" / "password").read_text().strip()
    socket = Path(runtime) / socket_name((home / "redis").absolute())
    return redis.Redis(unix_socket_path=str(socket), password=password)


def every_value(client: redis.Redis) -> list[bytes]:
    """Every key name and every value of every key, whatever its type."""
    out: list[bytes] = []
    readers = {
        b"string": lambda k: [client.get(k) or b""],
        b"hash": lambda k: [b for pair in client.hgetall(k).items() for b in pair],
        b"list": lambda k: client.lrange(k, 0, -1),
        b"set": lambda k: list(client.smembers(k)),
        b"zset": lambda k: [m for m, _ in client.zrange(k, 0, -1, withscores=True)],
        b"stream": lambda k: [
            b for _, fields in client.xrange(k) for pair in fields.items() for b in pair
        ],
    }
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        out.append(key)
        out.extend(readers[kind](key))
    return out


def leaks(blob: bytes) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret.encode() in blob]


def test_no_secret_typed_into_a_task_is_kept_anywhere(
    embedded_env: dict[str, str], tmp_path: Path, isolated_home: Path
) -> None:
    embedded = embedded_env
    project = tmp_path / "hello"
    shutil.copytree(EXAMPLE, project)
    up = run_ateam("up", str(project), "--detach", env=embedded, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr

    # The verb: redacted before the request reaches Redis, and the sender is told.
    sent = run_ateam("send", "hello/zeus", TASK, env=embedded)
    assert sent.returncode == 0, sent.stderr
    assert "5 secrets replaced by ****" in sent.stderr
    assert "env_passthrough" in sent.stderr and not leaks(sent.stderr.encode())

    # The console: the same text typed, a plan line and a context item; then the handoff.
    console = run_ateam(
        "console",
        "--no-ui",
        env=embedded,
        timeout=60,
        input=(
            "/attach hello/zeus\n"
            f"{TASK}\n"
            f"/plan append - [ ] rotate {SECRETS['github']}\n"
            f"/context post --content 'aws {SECRETS['aws']}' key for {SECRETS['openai']}\n"
            "/summarize\n"
            "/handoff\n"
        ),
    )
    assert console.returncode == 0, console.stdout + console.stderr
    shown = console.stdout + console.stderr
    assert "secrets replaced by ****" in shown
    assert "echo: deploy with key ****" in shown  # the agent worked on the redacted text
    assert '"handoff_ready": true' in shown or "handoff_ready" in shown
    assert not leaks(shown.encode()), shown

    # Restart the agent, as after an upgrade: it rebuilds everything from what it kept.
    down = run_ateam("up", str(project), "--down", env=embedded, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    again = run_ateam("up", str(project), "--detach", env=embedded, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    wait_for(lambda: embedded_ps(embedded).get("hello/zeus", {}).get("state") == "idle", 30, "idle")

    files = [p for root in (project / ".ateam", isolated_home) for p in root.rglob("*")]
    scanned = [p for p in files if p.is_file() and not p.is_socket()]
    assert any(p.name.startswith("appendonly") for p in scanned), "the AOF was not scanned"
    assert any(p.name == "queue.jsonl" for p in scanned)
    assert any(p.name == "handoff.json" for p in scanned)
    for path in scanned:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            # A temporary file of an atomic write (the session snapshot, every few
            # seconds) renamed away since the listing: its content is the final file's.
            continue
        assert not leaks(data), path

    client = embedded_client(isolated_home, embedded["ATEAM_RUNTIME_DIR"])
    with client:
        values = every_value(client)
        assert len(values) > 10
        found = [v for v in values if leaks(v)]
        assert not found, found[:3]
        mirrored = client.get(next(k for k in client.scan_iter("*handoff*")))
        assert mirrored is not None and b"****" in mirrored


def test_a_secret_passed_through_the_environment_reaches_tools_and_nothing_else(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    # No built-in pattern knows this shape: only its value marks it as a secret.
    token = "plain-looking-value-5f3a9c1e7b"
    call = {
        "name": "os.exec",
        "args": {"cmd": 'printf %s "$DEPLOY_TOKEN" > used.txt; echo "using $DEPLOY_TOKEN"'},
    }
    root = write_scripted_project(
        tmp_path / "p",
        "p",
        [{"text": "Deploying.", "tool_calls": [call]}, {"text": "Deployed."}],
        agent_yaml={"tools": {"env_passthrough": ["DEPLOY_TOKEN"]}},
    )
    start_agent("p/zeus", cwd=root, env={"DEPLOY_TOKEN": token})

    sent = run_ateam("send", "p/zeus", "deploy it", env=subprocess_env(ATEAM_REDIS_URL=bus.url))
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: bus.task_ends("p/zeus"), 20, "the task to end")

    assert (root / "used.txt").read_text() == token  # the command saw the real value
    output = [b for _, b in bus.events("p/zeus") if b.get("type") == "tool.output"]
    shown = b"".join(str(b).encode() for b in output)
    assert b"using ****" in shown
    for _, body in bus.events("p/zeus"):
        assert token not in str(body)
    for path in (root / ".ateam").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    assert any("using ****" in str(t.get("content")) for t in history_turns(root))


def test_a_send_from_outside_the_project_uses_the_agents_own_redact_patterns(
    start_agent: AgentFactory, bus: Bus, tmp_path: Path
) -> None:
    import threading

    root = write_scripted_project(tmp_path / "p", "p", [{"text": "ok"}])
    (root / ".ateam" / "redact.yaml").write_text(
        "patterns:\n  - {name: internal, regex: 'itk_[A-Za-z0-9]{32}'}\n"
    )
    token = "itk_" + "a1B2c3D4e5F6g7H8" * 2
    start_agent("p/zeus", cwd=root)
    seen: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        with redis.Redis.from_url(bus.url).monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                seen.append(str(command.get("command")))
                if "task.end" in seen[-1] or len(seen) > 5000:
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ready.wait(5)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sent = subprocess_env(ATEAM_REDIS_URL=bus.url)
    result = run_ateam("send", "p/zeus", f"use {token} for it", env=sent, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "1 secret replaced by ****" in result.stderr
    wait_for(lambda: bus.task_ends("p/zeus"), 20, "the task to end")
    watcher.join(10)

    assert any("use **** for it" in command for command in seen), seen[-5:]
    assert not any(token in command for command in seen)


# --- issue 22, point 5: a secret a tool prints in pieces -----------------------------------

RNG = random.Random(522)


def fake_base64(size: int) -> str:
    """Generated key material: random bytes in base64, never a real key."""
    return base64.b64encode(RNG.randbytes(size)).decode()


def fake_pem(kind: str, lines: int, end: bool = True) -> tuple[str, str]:
    """A private key block of ``lines`` random base64 lines, and its body."""
    body = "".join(fake_base64(48) + "\n" for _ in range(lines))
    tail = f"-----END {kind}PRIVATE KEY-----\n" if end else ""
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}{tail}", body


def alnum(size: int) -> str:
    return "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(size))


PIECE_KEYS = {
    "openai": "sk-proj-" + alnum(48),
    "github": "ghp_" + alnum(36),
    "aws": "AKIA" + "".join(RNG.choice(string.ascii_uppercase + "234567") for _ in range(16)),
    "bearer": alnum(40),
}
TOKEN_LINES = (
    f"export OPENAI_API_KEY={PIECE_KEYS['openai']}\n"
    f"git push https://{PIECE_KEYS['github']}@github.com/acme/app\n"
    f"aws_access_key_id = {PIECE_KEYS['aws']}\n"
    f"curl -H 'Authorization: Bearer {PIECE_KEYS['bearer']}' https://api.example.com\n"
)


def pieces(text: str, count: int) -> list[str]:
    """``text`` cut into ``count`` pieces at fixed places, inside words and armour lines."""
    cuts = sorted({len(text) * i // count + (5 if i % 2 else 0) for i in range(1, count)})
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def windows(secret: str, size: int = 16, step: int = 8) -> list[bytes]:
    """Runs of ``size`` characters of each line of ``secret`` every ``step``: a shown run
    of ``size + step`` characters or more holds one of them."""
    out = []
    for line in secret.splitlines():
        last = max(0, len(line) - size)
        out.extend(line[i : i + size].encode() for i in (*range(0, last, step), last))
    return [piece for piece in out if len(piece) == size]


def test_a_secret_a_command_prints_in_pieces_is_redacted_everywhere(
    start_agent: AgentFactory, bus: Bus, own_redis: Any, tmp_path: Path
) -> None:
    rsa, rsa_body = fake_pem("RSA ", 25)
    pkcs8, pkcs8_body = fake_pem("", 20)
    openssh, openssh_body = fake_pem("OPENSSH ", 22)
    # A block that never ends and outgrows the hold (64 KiB): given up on, and masked.
    endless, endless_body = fake_pem("EC ", 1500, end=False)
    # Each case: what the command prints, in how many pieces, with which pauses (s).
    cases = {
        "pem-1": (f"$ cat key\n{rsa}ok\n", 1, [0.0]),
        "pem-2": (f"$ cat key\n{pkcs8}ok\n", 2, [2.0]),
        "pem-10": (f"{openssh}ok\n", 10, [0.05, 0.3, 1.2]),
        "pem-split-begin": (rsa, 3, [1.5]),  # the second cut falls inside the armour line
        "tokens-1": (TOKEN_LINES, 1, [0.0]),
        "tokens-2": (TOKEN_LINES, 2, [2.0]),
        "tokens-10": (TOKEN_LINES, 10, [0.05, 0.05, 1.5, 0.05, 0.3]),
        "endless": (endless + "$ ", 2, [0.05]),
    }
    root = tmp_path / "p"
    calls = []
    for name, (text, count, pauses) in cases.items():
        case = root / "out" / name
        case.mkdir(parents=True)
        steps = []
        for index, piece in enumerate(pieces(text, count)):
            (case / str(index)).write_text(piece)
            steps.append(f"cat out/{name}/{index}")
            if index < count - 1:
                steps.append(f"sleep {pauses[index % len(pauses)]}")
        calls.append({"name": "os.exec", "args": {"cmd": "; ".join(steps)}})
    # The model's reply holds a key too, streamed a word every 0.1 s: twice the framing
    # window, so without the hold each word of it would be a frame of its own.
    said, said_body = fake_pem("DSA ", 8)
    turns = [{"text": "Printing the keys.", "tool_calls": calls}, {"text": f"Done:\n{said}"}]
    write_scripted_project(root, "p", turns, token_delay_ms=100)
    agent = start_agent("p/zeus", cwd=root)

    sent = run_ateam("send", "p/zeus", "print them", env=subprocess_env(ATEAM_REDIS_URL=bus.url))
    assert sent.returncode == 0, sent.stderr
    wait_for(lambda: bus.task_ends("p/zeus"), 60, "the task to end")
    assert agent.terminate() == 0  # history, log and queue flushed

    secrets = {
        "rsa": rsa_body,
        "pkcs8": pkcs8_body,
        "openssh": openssh_body,
        "endless": endless_body,
        "said": said_body,
        **PIECE_KEYS,
    }
    probes = {name: windows(secret) for name, secret in secrets.items()}

    def leaks_in(blob: bytes) -> list[str]:
        return [name for name, runs in probes.items() if any(run in blob for run in runs)]

    # Every event, one by one and each call's output joined as a console shows it.
    events = [body for _, body in bus.events("p/zeus")]
    shown: dict[str, bytes] = {}
    for body in events:
        blob = decode_chunk(body) if body.get("type") == "tool.output" else b""
        assert not leaks_in(blob + str(body).encode()), body
        if blob:
            shown[body["call_id"]] = shown.get(body["call_id"], b"") + blob
    outputs = [shown.get(str(e["call_id"]), b"") for e in events if e.get("type") == "tool.end"]
    assert len(outputs) == len(cases)
    by_case = dict(zip(cases, outputs, strict=True))
    for name, output in by_case.items():
        assert not leaks_in(output), name
        assert b"****" in output, (name, output)
    for name in ("pem-1", "pem-2", "pem-10", "pem-split-begin"):
        assert b"PRIVATE KEY-----\n****\n-----END " in by_case[name], by_case[name]
    assert by_case["tokens-1"] == Redactor().redact(TOKEN_LINES).encode()
    assert (
        b"[ateam: a private key block was held past 64 KiB without its end" in (by_case["endless"])
    )

    said_shown = "".join(str(e.get("text", "")) for e in events if e.get("type") == "token")
    assert "-----BEGIN DSA PRIVATE KEY-----\n****\n-----END DSA" in said_shown, said_shown

    # What a user tails.
    tail = run_ateam("tail", "p/zeus", "--from", "0", env=subprocess_env(ATEAM_REDIS_URL=bus.url))
    assert tail.returncode == 0, tail.stderr
    assert "-----END OPENSSH PRIVATE KEY-----" in tail.stdout
    assert not leaks_in(tail.stdout.encode() + tail.stderr.encode())

    # The stream and every other key, raw; the server's append-only file; every file
    # the agent keeps (history, log, queue, ...) and its output.
    client = redis.Redis.from_url(bus.url)
    with client:
        values = every_value(client)
    assert any(b"tool.output" in value for value in values)
    for value in values:
        assert not leaks_in(value), value[:200]
    aof = [p for p in Path(own_redis.workdir).rglob("appendonly*") if p.is_file()]
    assert aof and sum(p.stat().st_size for p in aof) > 10_000
    # (script.yaml is the stand-in model's script: the test's input, like out/.)
    files = [p for p in (root / ".ateam").rglob("*") if p.is_file() and p.name != "script.yaml"]
    assert any(p.name == "history.jsonl" for p in files)
    assert any(p.name == "agent.log" for p in files) or agent.stderr()
    for path in [*aof, *files, agent.stderr_path]:
        assert not leaks_in(path.read_bytes()), path
