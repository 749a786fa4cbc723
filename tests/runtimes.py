"""The real coding-agent runtimes (Claude Code, Codex) set up for one test, fully offline.

``.ci/run`` installs the pinned npm packages (:data:`PACKAGES`) under ``.ci/npm``;
:func:`claude_code_runtime` and :func:`codex_runtime` return what it takes to start a
runtime's ACP adapter against a local wire server (:mod:`tests.servers.anthropic_wire`,
:mod:`tests.servers.responses_wire`) with a private ``HOME`` under the test's
``tmp_path``: the command (absolute paths), the environment, and the ``models.yaml``
entry ateam would be given for it.

A missing or wrong-version install is an error, never a skip: CI installs the packages,
so a test that cannot find them must fail loudly (:class:`RuntimeNotInstalled`).

``python -m tests.runtimes missing`` prints the ``name@version`` specs not installed at
their pinned version (nothing when all are), which is how ``.ci/run`` keeps the pins in
this one place.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[1]
NPM_PREFIX = REPO / ".ci" / "npm"
"""Where ``.ci/run`` installs npm packages (the MCP Inspector's prefix too)."""

PACKAGES: dict[str, str] = {
    "@anthropic-ai/claude-code": "2.1.328",
    "@zed-industries/claude-code-acp": "0.16.2",
    "@openai/codex": "0.169.0",
    "@zed-industries/codex-acp": "0.16.0",
}
"""The pinned runtimes: the ``claude`` CLI and its ACP adapter, ``codex`` and its adapter."""

CODEX_MODEL = "gpt-5.5"
"""The one model slug both codex 0.169 and codex-acp 0.16 know: an unknown one makes a
"model metadata not found" warning arrive as an agent message every turn."""

CodexApproval = Literal["untrusted", "on-failure", "on-request", "never"]


class RuntimeNotInstalled(RuntimeError):
    """A runtime's npm package is missing or not at its pinned version."""


def install_command(specs: list[str] | None = None, prefix: Path = NPM_PREFIX) -> str:
    """The command that installs ``specs`` (default: every pinned package) under ``prefix``."""
    specs = specs if specs is not None else [f"{name}@{v}" for name, v in PACKAGES.items()]
    return f"npm install --prefix {prefix} --save-exact --no-audit --no-fund {' '.join(specs)}"


def installed_version(package: str, prefix: Path = NPM_PREFIX) -> str | None:
    """The version of ``package`` under ``prefix``, or ``None`` when it is not installed."""
    manifest = prefix / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def missing_packages(prefix: Path = NPM_PREFIX) -> list[str]:
    """``name@version`` of each pinned package not installed at that version."""
    return [
        f"{name}@{version}"
        for name, version in PACKAGES.items()
        if installed_version(name, prefix) != version
    ]


def npm_prefix(*packages: str, prefix: Path = NPM_PREFIX) -> Path:
    """``prefix`` (``.ci/npm``), once ``packages`` (default: all pinned) are installed there.

    Raises:
        RuntimeNotInstalled: one is missing or at another version; the message says how
            to install it.
    """
    wanted = packages or tuple(PACKAGES)
    missing = [spec for spec in missing_packages(prefix) if spec.rpartition("@")[0] in wanted]
    if missing:
        raise RuntimeNotInstalled(
            f"{', '.join(missing)} not installed under {prefix} (.ci/run installs them); "
            f"run: {install_command(missing, prefix)}"
        )
    return prefix


def _executable(path: Path) -> str:
    if not os.access(path, os.X_OK):
        raise RuntimeNotInstalled(f"{path} is missing or not executable; run: {install_command()}")
    return str(path)


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise RuntimeNotInstalled("node is not on PATH (the Claude Code ACP adapter runs on it)")
    return node


@dataclass(frozen=True)
class RuntimeSetup:
    """How to start one runtime's ACP adapter for one test."""

    name: str
    """``claude-code`` or ``codex``."""
    command: list[str]
    """The adapter's command line, absolute paths."""
    env: dict[str, str]
    """Variables on top of the inherited ``PATH`` etc. (the ACP SDK's default environment)."""
    home: Path
    """The private ``HOME`` (in ``env``), with the runtime's configuration in it."""
    mode: str | None = None
    """The ACP session mode to switch to after ``session/new`` (``session/set_mode``),
    ``None`` to keep the one the configuration starts in."""
    log: Path = field(init=False)
    """Where a test sends the adapter's stderr."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "log", self.home / f"{self.name}-acp.stderr.log")

    def models_yaml_entry(self, id: str) -> dict[str, Any]:
        """This runtime as an entry of ateam's ``models.yaml`` (provider ``acp``)."""
        entry: dict[str, Any] = {
            "id": id,
            "provider": "acp",
            "command": list(self.command),
            "env": dict(self.env),
        }
        if self.mode is not None:
            entry["mode"] = self.mode
        return entry


def claude_code_runtime(tmp_path: Path, anthropic_base_url: str) -> RuntimeSetup:
    """Claude Code through ``@zed-industries/claude-code-acp``, on a local Messages API.

    The adapter runs on node and starts the pinned ``claude`` binary
    (``CLAUDE_CODE_EXECUTABLE``; the one bundled in the adapter's SDK is older).
    ``IS_SANDBOX=1`` when running as root: Claude Code refuses to bypass permissions as
    root otherwise, and ``session/new`` fails with "Query closed before response received".
    """
    prefix = npm_prefix("@anthropic-ai/claude-code", "@zed-industries/claude-code-acp")
    modules = prefix / "node_modules"
    adapter = modules / "@zed-industries" / "claude-code-acp" / "dist" / "index.js"
    claude = modules / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
    home = tmp_path / "claude-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": anthropic_base_url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # An API error (a 429) surfaces at once as JSON-RPC -32603; by default Claude
        # Code retries with backoff (7 tries in the first minute) and says nothing over
        # ACP meanwhile.
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "CLAUDE_CODE_EXECUTABLE": _executable(claude),
    }
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    if not adapter.is_file():
        raise RuntimeNotInstalled(f"{adapter} is missing; run: {install_command()}")
    return RuntimeSetup("claude-code", [_node(), str(adapter)], env, home)


def codex_runtime(
    tmp_path: Path,
    responses_base_url: str,
    *,
    approval: CodexApproval = "untrusted",
    mode: str | None = None,
) -> RuntimeSetup:
    """Codex through ``@zed-industries/codex-acp``, on a local Responses API.

    The command is the adapter's native binary, never the npm ``codex-acp`` node wrapper:
    the wrapper does not pass SIGTERM on, so the binary outlives it. The binary embeds its
    own Codex core (the installed ``codex`` is not used). ``$HOME/.codex/config.toml``
    names a custom provider (so no ``authenticate`` is needed), turns retries off (a
    server error surfaces at once, not after ~25 s) and runs commands without a sandbox
    (``workspace-write`` needs bubblewrap: without it every command exits 101).

    Args:
        approval: Codex's ``approval_policy``; ``untrusted`` asks the client
            (``session/request_permission``) before a command.
        mode: an ACP session mode id to switch to after ``session/new`` (``read-only``,
            ``auto``, ``full-access``). ``session/new`` lists ``modes`` only when the
            configuration matches a preset (``never`` here: ``full-access``), yet
            ``session/set_mode`` works either way.
    """
    prefix = npm_prefix("@openai/codex", "@zed-industries/codex-acp")
    binary = prefix / "node_modules" / "@zed-industries" / "codex-acp-linux-x64" / "bin"
    home = tmp_path / "codex-home"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        _codex_config(responses_base_url, approval), encoding="utf-8"
    )
    env = {"HOME": str(home), "OPENAI_API_KEY": "test-key"}
    return RuntimeSetup("codex", [_executable(binary / "codex-acp")], env, home, mode)


def _codex_config(base_url: str, approval: CodexApproval) -> str:
    return f"""\
model = "{CODEX_MODEL}"
model_provider = "fake"
approval_policy = "{approval}"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake"
base_url = "{base_url}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


def main(argv: list[str]) -> int:
    """``missing``: print the pinned specs not installed (for ``.ci/run``)."""
    if argv != ["missing"]:
        print("usage: python -m tests.runtimes missing", file=sys.stderr)
        return 2
    print(" ".join(missing_packages()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
