"""Typed schemas of the YAML files under ``.ateam/`` (SPEC §3, §7, §11).

These pydantic models are the boundary between hand-written YAML and the program:
every model forbids unknown fields, so a typo is an error instead of a silently
ignored setting. They are frozen; the loader builds the runtime view
(:class:`~ateam.config.loader.ProjectConfig`) on top of them.

One class per file, plus the sections they share:

=================  ======================================================
``project.yaml``   :class:`ProjectFile`
``models.yaml``    :class:`ModelsFile` (a list of :class:`ModelEntry`)
``tools.yaml``     :class:`ToolsFile` (:class:`TransportSpec`, :class:`ToolPolicy`,
                   :class:`ExecSpec`)
``redact.yaml``    :class:`RedactFile` (a list of :class:`RedactPattern`)
``agent.yaml``     :class:`AgentSpec`
=================  ======================================================
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

# Re-exported: names were checked here before they had a module of their own.
from ateam.config.names import NAME_PATTERN as NAME_PATTERN
from ateam.config.names import check_name as check_name
from ateam.config.names import checked_name as checked_name
from ateam.constants import EVENT_LOG_MAX_BYTES, OWNER_LAG_BYTES

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_M = TypeVar("_M", bound=BaseModel)


def _normalise_namespace(value: str | None) -> str | None:
    # Keys are built as f"{namespace}{rest}", so the separator must be part of it;
    # accepting "team1" as well as "team1:" spares users a confusing key layout.
    if value is None:
        return None
    if not value or any(ch.isspace() for ch in value):
        raise ValueError("must be a non-empty string without whitespace")
    return value if value.endswith(":") else f"{value}:"


def _check_env_name(value: str | None) -> str | None:
    if value is not None and not _ENV_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid environment variable name")
    return value


def _default(model: type[_M]) -> _M:
    """``model()``, the default of a section left out, made without its validator.

    Every field takes its default, which needs no checking; a validator built only to
    check them would cost a process start its time and memory (issue 28 §2), for each
    of a dozen sections a file rarely leaves out all at once. The file's own model
    validates the sections it is given.
    """
    return model.model_construct()


class _Spec(BaseModel):
    """Common settings: unknown fields are errors and loaded values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class HooksSpec(_Spec):
    """Quality-gate hooks (``hooks`` in ``project.yaml`` and ``agent.yaml``).

    Each is a shell command run in the agent's working directory with the event as JSON
    on stdin: exit 0 accepts, exit 2 refuses (its stderr is the feedback), any other exit
    is a hook failure, reported and never a refusal. ``agent.yaml`` wins hook by hook, and
    ``""`` there turns the project's hook off for that agent (YAML ``null`` reads as unset).
    """

    task_created: str | None = None
    """Before a task is put on the board; a refusal writes nothing."""
    task_done: str | None = None
    """Before an agent marks the board task it worked on done."""
    agent_idle: str | None = None
    """When an agent is about to go idle after a task; a refusal is its next input."""
    before_tool: str | None = None
    """Before each tool call; a refusal is the call's result and the tool is not run."""
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """How long one hook may run; one that takes longer is killed (a hook failure)."""

    def over(self, base: HooksSpec) -> HooksSpec:
        """These hooks laid over ``base``: what is set here wins, the rest is ``base``'s."""
        return base.model_copy(update={name: getattr(self, name) for name in self.model_fields_set})


# --- project.yaml -------------------------------------------------------------------


class ProjectFile(_Spec):
    """``project.yaml``: the project's identity."""

    name: str | None = None
    """Project name; defaults to the directory that contains the nearest ``.ateam/``."""
    namespace: str | None = None
    """Redis key prefix for this project (wins over ``tools.yaml`` ``transport.namespace``)."""
    hooks: HooksSpec = _default(HooksSpec)
    """Quality-gate hooks of every agent of the project (and of ``ateam tasks add``)."""

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "project")

    @field_validator("namespace")
    @classmethod
    def _valid_namespace(cls, value: str | None) -> str | None:
        return _normalise_namespace(value)


# --- tools.yaml ---------------------------------------------------------------------


_URL_SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
)
"""What ``transport.url`` may start with (the last four: Cluster and Sentinel, issue 13)."""


class TransportSpec(_Spec):
    """How to reach Redis (``tools.yaml`` ``transport``); unset ``url`` means embedded."""

    url: str | None = None
    """``redis://``, ``rediss://`` or ``unix://`` URL, or ``redis+cluster://`` /
    ``redis+sentinel://`` (``rediss+…`` with TLS)."""
    username: str | None = None
    """Redis ACL user."""
    password: str | None = Field(default=None, repr=False)
    """Literal password; prefer ``password_env``. After loading, holds the effective one."""
    password_env: str | None = None
    """Environment variable holding the password; wins over ``password`` when it is set."""
    tls: bool = False
    """Use TLS: a ``redis://`` URL is upgraded to ``rediss://`` (``redis+…`` to ``rediss+…``)."""
    ca_file: str | None = None
    """CA bundle for TLS; a relative path is resolved against the defining ``.ateam/``."""
    cert_file: str | None = None
    """Client certificate for mutual TLS (PEM), resolved like ``ca_file``."""
    key_file: str | None = None
    """Private key of ``cert_file`` (PEM, unencrypted), resolved like ``ca_file``."""
    namespace: str | None = None
    """Redis key prefix shared by everything using this transport."""
    allow_eviction: bool = False
    """Start even on a server whose ``maxmemory-policy`` may evict keys (a risk, warned of)."""
    cluster: bool = False
    """``url`` (``redis://host:port[,host:port…]``) names Redis Cluster seed nodes: the same
    as writing ``redis+cluster://``."""

    @field_validator("password_env")
    @classmethod
    def _valid_password_env(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    @field_validator("namespace")
    @classmethod
    def _valid_namespace(cls, value: str | None) -> str | None:
        return _normalise_namespace(value)

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(_URL_SCHEMES):
            schemes = ", ".join(_URL_SCHEMES[:-1])
            raise ValueError(f"must start with {schemes} or {_URL_SCHEMES[-1]}")
        return value

    @model_validator(mode="after")
    def _cluster_over_tcp(self) -> TransportSpec:
        not_tcp = ("unix://", "redis+sentinel://", "rediss+sentinel://")
        if self.cluster and self.url and self.url.startswith(not_tcp):
            raise ValueError("cluster: true needs a redis:// or rediss:// url of a Cluster node")
        return self


class ToolPolicy(_Spec):
    """Project-wide tool policy (``tools.yaml`` ``tools``); deny wins over allow."""

    allow: tuple[str, ...] = ()
    """Tool-name globs allowed for every agent, in addition to each agent's own list."""
    deny: tuple[str, ...] = ()
    """Tool-name globs denied for every agent, whatever the agents allow."""


class ExecSpec(_Spec):
    """Limits of ``os.exec`` (``tools.yaml`` ``exec``, overridable per agent)."""

    timeout_s: float = Field(default=300.0, gt=0)
    """Wall-clock limit per command; the whole process group is killed when it passes."""
    cpu_s: float | None = Field(default=None, gt=0)
    """CPU-time limit per command (``RLIMIT_CPU``); unset means none."""
    output_limit_bytes: int = Field(default=64 * 1024, gt=0)
    """How much of the tail of a command's output is returned to the model."""
    inherit_env: bool = False
    """Pass the agent's whole environment instead of a minimal one."""
    env_allow: tuple[str, ...] = ()
    """Extra variables passed through on top of PATH, HOME, LANG and TERM."""
    owner_lag_bytes: int = Field(default=OWNER_LAG_BYTES, ge=0, le=EVENT_LOG_MAX_BYTES // 2)
    """How far the owning console may fall behind a command's output before the agent
    stops reading it (the command then waits, as in a terminal); ``0``: never. At most
    half the event stream's byte cap, so an owner within it never loses a byte."""


class ToolsFile(_Spec):
    """``tools.yaml``: transport, project-wide tool policy and exec defaults."""

    transport: TransportSpec = _default(TransportSpec)
    tools: ToolPolicy = _default(ToolPolicy)
    exec: ExecSpec = _default(ExecSpec)


# --- models.yaml --------------------------------------------------------------------


class Provider(StrEnum):
    """Model providers (SPEC §7); ``echo`` and ``scripted`` work offline."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    ECHO = "echo"
    SCRIPTED = "scripted"
    ACP = "acp"
    """A coding agent (Claude Code, Codex, Gemini CLI, ...) driven over the Agent Client
    Protocol: it runs whole tasks with its own tools (issue 24)."""


class ModelSettings(BaseModel):
    """Default inference settings; keys other than the two named ones pass through."""

    # Providers take many knobs (top_p, seed, reasoning_effort, ...); listing them all
    # here would tie the schema to provider releases, so extras are allowed.
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)

    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)

    def as_kwargs(self) -> dict[str, Any]:
        """The settings that were given, named ones and extras, ready for a provider call."""
        return self.model_dump(exclude_none=True)


class Prices(_Spec):
    """Prices in currency units per million tokens, for usage accounting."""

    input_per_mtok: float = Field(default=0.0, ge=0)
    output_per_mtok: float = Field(default=0.0, ge=0)


class ModelEntry(_Spec):
    """One entry of ``models.yaml`` ``models``."""

    id: str = Field(pattern=r"^\S+$")
    """The name agents, ``/use`` and fallbacks refer to."""
    provider: Provider
    model: str
    """The provider's own model name; defaults to ``id``."""
    base_url: str | None = None
    """Endpoint of an OpenAI-compatible server (Ollama, vLLM, OpenRouter, ...)."""
    api_key_env: str | None = None
    """Environment variable holding the API key (never the key itself)."""
    context_window: int = Field(default=8192, gt=0)
    settings: ModelSettings = _default(ModelSettings)
    prices: Prices | None = None
    script: Path | None = None
    """Turn script of a ``scripted`` model; absolute after loading."""
    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    """The runtime's command line (``acp`` only), e.g. ``[claude-code-acp]``."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables the runtime is started with (``acp`` only), beside the agent's
    ``env_passthrough``. Name variables here, not secrets: a key belongs in the
    environment or in the runtime's own login."""
    install: str | None = None
    """How to install the runtime when its command is missing (``acp`` only); the known
    runtimes have one built in."""
    mode: str | None = None
    """The runtime's own session mode (``acp`` only, e.g. Codex's ``read-only``); unset
    means the one that matches the agent's approval policy."""

    @model_validator(mode="before")
    @classmethod
    def _model_defaults_to_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("model") is None and "id" in data:
            return {**data, "model": data["id"]}
        return data

    @field_validator("api_key_env")
    @classmethod
    def _valid_api_key_env(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    @field_validator("env")
    @classmethod
    def _valid_env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            _check_env_name(name)
        return value

    @model_validator(mode="after")
    def _fields_match_provider(self) -> ModelEntry:
        if self.provider is Provider.SCRIPTED and self.script is None:
            raise ValueError("a scripted model needs `script: PATH`")
        if self.provider is Provider.ACP and self.command is None:
            raise ValueError("an acp runtime needs `command: [PROGRAM, ARGS...]`")
        # A field of another provider kind is a mistake (a pasted entry), not a no-op.
        for name, kind in _PROVIDER_ONLY.items():
            if self.provider is not kind and name in self.model_fields_set:
                raise ValueError(f"`{name}` only applies to provider `{kind.value}`")
        return self

    @property
    def is_runtime(self) -> bool:
        """Whether this entry is a whole coding agent rather than a model API."""
        return self.provider is Provider.ACP


_PROVIDER_ONLY: dict[str, Provider] = {
    "script": Provider.SCRIPTED,
    "command": Provider.ACP,
    "env": Provider.ACP,
    "install": Provider.ACP,
    "mode": Provider.ACP,
}


class EmbeddingsProvider(StrEnum):
    """Where knowledge-base vectors come from (SPEC §10)."""

    HASHING = "hashing"
    """Offline feature hashing: no download, no network (the default)."""
    OPENAI = "openai"
    """Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, Ollama, vLLM, ...)."""


class EmbeddingsSpec(_Spec):
    """``models.yaml`` ``embeddings``: the embedder of every agent's knowledge bases.

    Fields that do not apply to the chosen provider are ignored, so a nearer file can
    switch providers without unsetting the other one's fields inherited from farther.
    """

    provider: EmbeddingsProvider = EmbeddingsProvider.HASHING
    base_url: str | None = None
    """The endpoint (``openai``); unset means OpenAI's own."""
    model: str | None = None
    """The embedding model (``openai``; required there)."""
    api_key_env: str | None = None
    """Environment variable holding the API key (``openai``); unset sends none."""
    dimensions: int | None = Field(default=None, gt=0)
    """Ask the model for vectors of this length (``openai``, models that support it)."""
    dim: int | None = Field(default=None, ge=16)
    """Vector length of the ``hashing`` embedder; unset means its default (2048)."""

    @field_validator("api_key_env")
    @classmethod
    def _valid_api_key_env(cls, value: str | None) -> str | None:
        return _check_env_name(value)

    @model_validator(mode="after")
    def _openai_needs_a_model(self) -> EmbeddingsSpec:
        if self.provider is EmbeddingsProvider.OPENAI and not self.model:
            raise ValueError("provider openai needs `model:` (e.g. text-embedding-3-small)")
        return self


class ModelsFile(_Spec):
    """``models.yaml``: the model registry."""

    models: tuple[ModelEntry, ...] = ()
    default: str | None = None
    """Model of agents that name none; ``echo`` when unset."""
    embeddings: EmbeddingsSpec | None = None
    """The knowledge bases' embedder; unset means the offline ``hashing`` one."""


# Made without ModelEntry's own validator, which nothing else may need (issue 28 §2);
# a test checks it equals the validated entry.
ECHO_MODEL = ModelEntry.model_construct(id="echo", provider=Provider.ECHO, model="echo")
"""The built-in offline model that exists even without any ``models.yaml``."""


# --- redact.yaml --------------------------------------------------------------------


class RedactPattern(_Spec):
    """An extra secret pattern; matches are replaced by ``****`` (SPEC §11)."""

    name: str
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        return value

    def compile(self) -> re.Pattern[str]:
        """The compiled pattern (``re`` caches compilations, so this is cheap to repeat)."""
        return re.compile(self.regex)


class RedactFile(_Spec):
    """``redact.yaml``: extra redaction patterns on top of the built-in ones."""

    patterns: tuple[RedactPattern, ...] = ()


# --- agents/<name>/agent.yaml -------------------------------------------------------


class Approval(StrEnum):
    """What happens when an agent calls a tool (SPEC §5.5)."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class SwitchingSpec(_Spec):
    """Thresholds of automatic model switching (SPEC §7)."""

    switch_at: float = Field(default=0.95, gt=0, le=1)
    """Context fill at which the agent moves to its next fallback."""
    switch_back: float = Field(default=0.50, gt=0, le=1)
    """Usage below which an idle agent returns to its primary model."""
    cooldown_s: float = Field(default=60.0, ge=0)
    """Minimum time between two switches; a model that failed rests this long."""
    retries: int = Field(default=2, ge=0, le=10)
    """Retries of a failed call (429, 529/503, 5xx, connection) before switching."""
    retry_backoff_s: float = Field(default=1.0, ge=0)
    """First retry delay; doubled each time, raised to the provider's Retry-After."""
    headroom_min: float = Field(default=0.05, ge=0, le=1)
    """Switch when the provider's rate-limit headroom falls below this fraction."""

    @field_validator("switch_back")
    @classmethod
    def _below_switch_at(cls, value: float, info: ValidationInfo) -> float:
        # Without the gap the agent would bounce between models on every turn.
        switch_at = info.data.get("switch_at")
        if switch_at is not None and value >= switch_at:
            raise ValueError(f"must be less than switch_at ({switch_at})")
        return value


class PromptsSpec(_Spec):
    """Prompt files, relative to the agent's directory."""

    base: str = "system_base.md"
    overlay: str = "system_overlay.md"


class AgentToolsSpec(_Spec):
    """The agent's tool allow-list and approval policy."""

    allow: tuple[str, ...] = ()
    """Tool-name globs this agent may call; every other tool is denied."""
    approval: dict[str, Approval] = Field(default_factory=dict)
    """Tool-name glob → ``allow`` | ``ask`` | ``deny``."""
    approval_timeout_s: float = Field(default=600.0, gt=0)
    """How long a call under ``ask`` waits for the owner before it counts as rejected."""
    env_passthrough: tuple[str, ...] = ()
    """Environment variables of the agent's process passed to its tools as secrets:
    ``os.exec`` commands see them (``$GITHUB_TOKEN``), and their values are masked
    wherever ateam writes or publishes text, so none reaches a prompt, event or file."""

    @field_validator("env_passthrough")
    @classmethod
    def _variable_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value


class FsSpec(_Spec):
    """File-system sandbox additions."""

    whitelist: tuple[str, ...] = ()
    """Extra directories the fs tools may touch, relative to the project root."""


class WatchdogSpec(_Spec):
    """The stall watch over the agent's worker (a busy agent must never hang unseen)."""

    stall_after_s: float = Field(default=120.0, gt=0)
    """Silence (no event) of a busy worker before the agent raises a ``worker.stalled``
    alert, shown in ``ps``/``/ps``."""
    cancel_after_s: float = Field(default=900.0, ge=0)
    """Silence before the stalled step is cancelled and the worker moves on; ``0``
    only alerts. Above the default ``os.exec`` timeout, so a quiet build is not cut."""
    step_timeout_s: float = Field(default=60.0, gt=0)
    """Bound of each upkeep step between tasks (summary, compaction, switch-back
    probe): one that takes longer is abandoned and the next task starts. Below
    ``stall_after_s`` by default: an upkeep step emits no task events, so a bound above
    the stall threshold also raises the stall alert first."""


ContextScope = Literal["task", "project", "global"]
ContextUrgency = Literal["background", "attention", "blocking"]
_TAG = re.compile(r"[A-Za-z0-9._-]{1,40}")


class ContextSubscriptionSpec(_Spec):
    """Which team context items (SPEC §9) reach this agent's model, and how many."""

    scopes: tuple[ContextScope, ...] = ("task", "project", "global")
    """Item scopes the agent is fed. ``task`` and ``project`` items stay in the project;
    ``global`` ones are for every project (an outage, a freeze)."""
    tags: tuple[str, ...] = ()
    """Only items carrying at least one of these tags; empty: any tag."""
    min_urgency: ContextUrgency = "attention"
    """The least urgent items fed; ``background`` ones are for people unless asked for."""
    budget_tokens: int = Field(default=500, ge=50, le=8000)
    """The most the team's items may cost in each call's context, within the working
    context budget (SPEC §8)."""

    @field_validator("tags")
    @classmethod
    def _tag_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for tag in value:
            if not _TAG.fullmatch(tag):
                raise ValueError(f"{tag!r} is not a tag (1-40 of A-Z a-z 0-9 . _ -)")
        return tuple(tag.lower() for tag in value)


class TeamSpec(_Spec):
    """How the agent works with its teammates (``team.send``, the task board)."""

    max_hops: int = Field(default=4, ge=1, le=64)
    """The longest chain of agent-to-agent messages one thread may run: a message that
    would be hop ``max_hops + 1`` is refused with ``team.hop_limit``."""
    notify: tuple[str, ...] = ()
    """Teammates (names in this project) told when this agent finishes or fails a board
    task or goes idle: a notice in their next model context, not a task (issue 26)."""

    @field_validator("notify")
    @classmethod
    def _valid_notify(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(check_name(name, "agent") for name in value))


class AgentSpec(_Spec):
    """``agents/<name>/agent.yaml``."""

    model: str | None = None
    """Primary model id; defaults to ``models.yaml`` ``default``, else ``echo``."""
    fallbacks: tuple[str, ...] = ()
    """Ordered alternative model ids."""
    switching: SwitchingSpec = _default(SwitchingSpec)
    cwd: str | None = None
    """Working directory, relative to the project root (the parent of ``.ateam/``)."""
    prompts: PromptsSpec = _default(PromptsSpec)
    tools: AgentToolsSpec = _default(AgentToolsSpec)
    fs: FsSpec = _default(FsSpec)
    exec: ExecSpec = _default(ExecSpec)
    """Overrides of ``tools.yaml`` ``exec`` for this agent."""
    max_iterations: int = Field(default=25, ge=1, le=1000)
    """Model calls per task before the loop stops (a runaway tool loop ends here)."""
    watchdog: WatchdogSpec = _default(WatchdogSpec)
    context: ContextSubscriptionSpec = _default(ContextSubscriptionSpec)
    """The team context items this agent is fed (SPEC §9)."""
    team: TeamSpec = _default(TeamSpec)
    take_tasks: bool = False
    """Take open tasks from the project's board when idle (claim, do, mark done)."""
    hooks: HooksSpec = _default(HooksSpec)
    """Quality-gate hooks of this agent, each over the one of ``project.yaml``."""
    require_plan: bool = False
    """Every task needs an approved plan before the agent edits or runs anything."""
    delegate: bool = False
    """Delegate mode by default: coordination tools only (``/delegate`` toggles it)."""
    description: str = ""
    worktree: Literal["none", "agent", "task"] = "none"
    """Its own git worktree and branch: none, one for the agent (``ateam/NAME``), or one
    per board task it takes (``ateam/NAME/TASK-ID``)."""
    commit: Literal["on_task_done", "never"] = "on_task_done"
    """Commit what a task changed in its worktree when the task ends."""
    base_branch: str | None = None
    """The branch worktrees are cut from; ``None``: the one checked out in the project root."""
