"""``ateam init``: a new project's ``.ateam/`` from the bundled template (SPEC §2, §3).

The template is the smallest project that runs as it is — offline, on the built-in
``echo`` model — and shows in comments how to reach a real one. Under ``.ateam/``:

* ``project.yaml``: the project's name;
* ``models.yaml``: ``echo``, commented OpenAI and Anthropic entries (keys named by
  ``api_key_env``) and the knowledge bases' embedder;
* ``agents/<agent>/``: one agent — ``agent.yaml`` (its tools and approvals),
  ``system_base.md`` and ``system_overlay.md`` (its system prompt);
* ``.gitignore``: runtime state and KB stores stay out of version control.

With ``--example`` the files are instead the commented template of every setting
(package data in ``ateam/config/example/``, the repository's ``.ateam.example/``): a
project that runs as it is, and reads as the reference of every file.

It lives here as text rather than as package data so that it is always installed with
the code that reads it, and so one test can check every file loads.

An existing project is never touched. The files are written into a staging directory
beside the target and moved into place with one ``rename``, which the kernel refuses
when ``.ateam/`` exists and is not empty: a second ``ateam init`` (even one racing the
first) fails with ``project.exists`` and changes nothing, and a failure half-way leaves
no partial project behind.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from ateam.config.discovery import CONFIG_DIR
from ateam.config.names import check_name
from ateam.config.runtimes import KNOWN
from ateam.errors import ConfigError, ProjectExists, UsageError

__all__ = ["DEFAULT_AGENT", "Scaffold", "example_files", "init_project"]

DEFAULT_AGENT = "zeus"
"""The agent a new project starts with."""

_PROJECT_YAML = """\
# project.yaml — who this project is. ateam reads every .ateam/ directory from the
# working directory up through its parents, then ~/.ateam/; the nearest setting wins.

# name: agent ids are "<name>/<agent>" ({project}/{agent}). Inside this directory (or
# below it) a bare agent name is enough: `ateam send {agent} "hi"`.
name: {project}

# namespace: prefix of every Redis key of this project, so several teams can share
# one Redis. Default: "ateam:".
# namespace: "{project}:"
"""

_MODELS_YAML = """\
# models.yaml — the models the agents may use and the knowledge bases' embedder.
#
# `echo` needs no key and no network: it answers "echo: <your text>", so this project
# runs as it is. To use a real model, uncomment an entry below, export the variable
# its api_key_env names (keys never go into these files), and point `default:` (or an
# agent's `model:`) at its id.

models:
  - id: echo
    provider: echo

  # Any OpenAI-compatible endpoint: OpenAI itself, or Ollama, vLLM, LM Studio,
  # llama.cpp, OpenRouter with base_url.
  # - id: gpt
  #   provider: openai
  #   model: gpt-4o-mini
  #   api_key_env: OPENAI_API_KEY
  #   context_window: 128000
  #   # base_url: http://localhost:11434/v1

  # - id: claude
  #   provider: anthropic
  #   model: claude-3-5-haiku-latest
  #   api_key_env: ANTHROPIC_API_KEY
  #   context_window: 200000
  #   settings:
  #     max_tokens: 4096

{runtimes}

# default: the model of agents whose agent.yaml names none.
default: {default}

# How `ateam kb add` and the kb.* tools turn text into vectors: unset, an offline
# embedder that needs no download; or an OpenAI-compatible endpoint:
# embeddings:
#   provider: openai
#   model: text-embedding-3-small
#   api_key_env: OPENAI_API_KEY
#   # base_url: http://localhost:11434/v1
# A store remembers the embedder that built it: after a change, ingest again into a
# fresh store (remove the kb/ directory) instead of mixing vectors.
"""

_AGENT_YAML = """\
# agent.yaml — the agent {agent} ({project}/{agent}); its directory name is its name.

description: General-purpose coding agent

# model: an id from models.yaml; unset means models.yaml `default` (echo).
# model: gpt
# fallbacks: models to move to when this one runs out of room or fails.
# fallbacks: [claude]

tools:
  # Tools are denied unless allowed here (globs work); tools.yaml can deny for all.
  # Built-ins: os.exec, fs.read, fs.list, fs.write, fs.patch, plan.*, kb.search,
  # kb.ingest, context.post, context.read, agents.list, memory.*, tasks.list,
  # tasks.add, tasks.claim, tasks.done, tasks.fail, tasks.reopen, tasks.retry (the
  # team's task board).
  allow:
    - fs.*
    - os.exec
    - plan.*
    - kb.*
    - context.*
    - memory.*
    - agents.list
    - tasks.*
  # approval: tool glob -> allow | ask | deny; `ask` waits for the attached console.
  approval:
    fs.patch: ask
    os.exec: ask
"""

_SYSTEM_BASE = """\
You are {agent}, a careful software engineer working in this project's repository.

- Read the relevant files before changing them; keep changes small and focused.
- Run the project's tests after a change and report what you ran and what it printed.
- When you are unsure what the user wants, ask one precise question instead of guessing.
- Never print secrets or the contents of environment variables.
"""

_SYSTEM_OVERLAY = """\
<!-- Your own additions to {agent}'s system prompt. Lines typed as "# text" in the
     console land here and apply from the next turn. -->
"""

_GITIGNORE = """\
# What ateam writes at run time: queues, history, logs, and the knowledge-base stores
# (rebuilt by ingesting again). They are per machine and hold copies of conversations
# and of ingested files, so they stay out of version control.
agents/*/state/
agents/*/kb/
kb/
"""

_TEMPLATE: dict[str, str] = {
    "project.yaml": _PROJECT_YAML,
    "models.yaml": _MODELS_YAML,  # its {runtimes} and {default} filled by _models_yaml
    "agents/{agent}/agent.yaml": _AGENT_YAML,
    "agents/{agent}/system_base.md": _SYSTEM_BASE,
    "agents/{agent}/system_overlay.md": _SYSTEM_OVERLAY,
    ".gitignore": _GITIGNORE,
}
"""Path inside ``.ateam/`` → content; ``{project}`` and ``{agent}`` are filled in."""

# The errors rename(2) gives when the target is a non-empty directory, or no directory.
_OCCUPIED = frozenset({errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR})


@dataclass(frozen=True)
class Scaffold:
    """What :func:`init_project` created."""

    root: Path
    """The project root (the directory holding ``.ateam/``)."""
    project: str
    """The project's name."""
    agent: str
    """The one agent's name."""
    files: tuple[Path, ...]
    """Every file written, relative to :attr:`root`."""


_EXAMPLE_NAME_LINE = "# name: myproj\n"
"""The commented ``name:`` of the example's ``project.yaml``, set by ``--name``."""


def example_files() -> dict[str, str]:
    """The commented template of every file: path inside ``.ateam/`` → its text."""
    found: dict[str, str] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif not entry.name.endswith((".pyc", ".pyo")):
                found[prefix + entry.name] = entry.read_text(encoding="utf-8")

    walk(resources.files("ateam.config") / "example", "")
    return dict(sorted(found.items()))


def init_project(
    directory: Path,
    *,
    name: str | None = None,
    agent: str = DEFAULT_AGENT,
    runtime: str | None = None,
    example: bool = False,
) -> Scaffold:
    """Create ``directory/.ateam/`` from the template (``directory`` too, if missing).

    Args:
        directory: The project root.
        name: The project's name; defaults to the directory's name.
        agent: The name of the project's one agent.
        runtime: A known coding agent (``claude-code``, ``codex``, ``gemini``) to make
            the project's default model; the offline ``echo`` without.
        example: Write the commented template of every file instead (its one agent is
            ``zeus`` on ``echo``; ``agent`` and ``runtime`` must stay unset).

    Raises:
        ProjectExists: ``.ateam`` exists and is not an empty directory; nothing changed.
        UsageError: The project or agent name is not a valid name.
        ConfigError: The directory cannot be written.
    """
    root = directory.expanduser().resolve()
    project = _valid(name or root.name, "project", hint="choose one with --name")
    agent = _valid(agent, "agent", hint="choose another with --agent")
    target = root / CONFIG_DIR
    if example:
        if agent != DEFAULT_AGENT or runtime is not None:
            raise UsageError(
                "--example writes the commented template as it is (one agent, zeus, on "
                "echo); leave out --agent and --runtime, or leave out --example"
            )
        relative = list(_example(name).items())
    else:
        template = {**_TEMPLATE, "models.yaml": _models_yaml(runtime)}
        relative = [(path.replace("{agent}", agent), text) for path, text in template.items()]
    _refuse_occupied(target)
    staging = root / f"{CONFIG_DIR}.init-{secrets.token_hex(4)}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        for path, text in relative:
            file = staging / path
            file.parent.mkdir(parents=True, exist_ok=True)
            if not example:
                text = text.replace("{project}", project).replace("{agent}", agent)
            with file.open("x", encoding="utf-8") as out:
                out.write(text)
        # The one step that makes the project appear; refused if someone was faster.
        os.rename(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno in _OCCUPIED and target.exists():
            raise _exists(target) from None
        where = exc.filename or root
        raise ConfigError(
            f"cannot create the project: {exc.strerror or exc}", file=str(where)
        ) from None
    files = tuple(Path(CONFIG_DIR) / path for path, _ in relative)
    return Scaffold(root=root, project=project, agent=agent, files=files)


def _example(name: str | None) -> dict[str, str]:
    """The example's files as written: ``--name`` set in ``project.yaml``, a ``.gitignore``."""
    files = {**example_files(), ".gitignore": _GITIGNORE}
    if name is not None:
        project_yaml = files["project.yaml"]
        if _EXAMPLE_NAME_LINE not in project_yaml:  # the example was edited: say so
            raise ConfigError("the example's project.yaml has no '# name: myproj' line to set")
        files["project.yaml"] = project_yaml.replace(_EXAMPLE_NAME_LINE, f"name: {name}\n", 1)
    return files


def _models_yaml(runtime: str | None) -> str:
    """The template's ``models.yaml``: every known runtime commented out, or one of them on."""
    if runtime is not None and runtime not in KNOWN:
        known = ", ".join(sorted(KNOWN))
        raise UsageError(f"--runtime: no runtime {runtime!r} is known; known: {known}")
    blocks = [KNOWN[name].entry_yaml(commented=name != runtime) for name in sorted(KNOWN)]
    return _MODELS_YAML.replace("{runtimes}", "\n\n".join(blocks)).replace(
        "{default}", runtime or "echo"
    )


def _valid(value: str, what: str, *, hint: str) -> str:
    try:
        return check_name(value, what)
    except ValueError as exc:
        raise UsageError(f"{exc}; {hint}") from None


def _refuse_occupied(target: Path) -> None:
    # Checked first for a clear message; the rename checks again, atomically.
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise _exists(target)
    if target.is_dir() and any(target.iterdir()):
        raise _exists(target)


def _exists(target: Path) -> ProjectExists:
    return ProjectExists(
        f"{target} already exists and is not empty; ateam init changed nothing",
        detail={"path": str(target)},
    )
