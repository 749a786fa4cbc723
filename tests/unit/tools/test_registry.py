"""The tool registry: generated schemas, deny-by-default policy, approvals, calls, plugins."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from ateam.config.schema import Approval
from ateam.errors import BadRequest, Code, RpcTimeout, ToolDenied
from ateam.tools import Tool, ToolContext, ToolRegistry, tool


@tool("fs.read")
def fs_read(
    ctx: ToolContext,
    path: str,
    mode: Literal["text", "base64"] = "text",
    limit: int | None = None,
) -> str:
    """Read a file inside the sandbox.

    Args:
        path: the file, relative to
            the agent's cwd.
        mode (str): how the content is encoded.
        limit: at most this many bytes.

    Returns:
        The content.
    """
    return f"{ctx.cwd}:{path}:{mode}:{limit}"


@tool("fs.patch")
def fs_patch(path: str, diff: str) -> str:
    """Propose a unified diff."""
    return f"patched {path}"


@tool("os.exec")
async def os_exec(ctx: ToolContext, cmd: str, timeout: float = 300.0, env: list[str] = []) -> str:  # noqa: B006
    """Run a command."""
    await asyncio.sleep(0)
    return f"ran {cmd} for {ctx.agent_id}"


@tool("kb.search")
def kb_search(
    query: str, k: int = 5, flags: dict[str, bool] | None = None, exact: bool = False
) -> list[str]:
    """Search the knowledge base."""
    return [query] * k


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([fs_read, fs_patch, os_exec, kb_search])


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(agent_id="proj/dev", cwd=tmp_path, task_id="t1", trace_id="tr1")


# --- schemas ------------------------------------------------------------------------


def test_schema_from_signature_and_docstring() -> None:
    spec = fs_read.spec()
    assert spec["name"] == "fs.read"
    assert spec["description"] == "Read a file inside the sandbox."
    params = spec["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["path"]
    props = params["properties"]
    assert set(props) == {"path", "mode", "limit"}  # ctx is not part of the schema
    assert props["path"] == {
        "type": "string",
        "description": "the file, relative to the agent's cwd.",
    }
    assert props["mode"]["enum"] == ["text", "base64"]
    assert props["mode"]["default"] == "text"
    assert props["mode"]["description"] == "how the content is encoded."
    assert {"type": "integer"} in props["limit"]["anyOf"]
    assert {"type": "null"} in props["limit"]["anyOf"]
    assert "title" not in params and "title" not in props["path"]


def test_schema_of_lists_dicts_bools_and_async() -> None:
    props = os_exec.parameters["properties"]
    assert os_exec.parameters["required"] == ["cmd"]
    assert props["env"]["type"] == "array"
    assert props["env"]["items"] == {"type": "string"}
    assert props["timeout"]["type"] == "number"
    kb = kb_search.parameters
    assert kb["required"] == ["query"]
    assert kb["properties"]["exact"] == {"type": "boolean", "default": False}
    flags = kb["properties"]["flags"]["anyOf"]
    assert {"type": "object", "additionalProperties": {"type": "boolean"}} in flags
    assert not kb_search.takes_context and os_exec.takes_context


def test_no_parameters_gives_empty_object_schema() -> None:
    @tool("agents.list")
    def agents_list() -> list[str]:
        """List agents."""
        return []

    assert agents_list.parameters["properties"] == {}
    assert agents_list.parameters["required"] == []


def test_parameter_named_like_a_basemodel_attribute() -> None:
    @tool("x.dump")
    def dump(json: str, copy: int = 1) -> str:
        return json * copy

    assert set(dump.parameters["properties"]) == {"json", "copy"}
    assert dump.validate({"json": "a", "copy": 2}) == {"json": "a", "copy": 2}


def test_unusable_signatures_are_refused() -> None:
    with pytest.raises(TypeError, match="untyped"):

        @tool("x.y")
        def untyped(untyped):  # type: ignore[no-untyped-def]
            return untyped

    with pytest.raises(TypeError, match="rest"):

        @tool("x.z")
        def varargs(*rest: str) -> None:
            return None

    with pytest.raises(ValueError, match=r"namespace\.verb"):
        tool("NoNamespace")(fs_patch.fn)


def test_default_timeouts_follow_the_spec() -> None:
    assert fs_read.timeout_s == 3.0
    assert kb_search.timeout_s == 30.0
    assert os_exec.timeout_s == 300.0
    assert tool("plan.read", timeout_s=7)(fs_patch.fn).timeout_s == 7


# --- policy -------------------------------------------------------------------------


def test_deny_by_default(registry: ToolRegistry) -> None:
    policy = registry.for_agent(allow=())
    assert policy.schemas() == []
    with pytest.raises(ToolDenied) as err:
        policy.check("fs.read")
    assert err.value.code == Code.TOOL_DENIED == "tool.denied"
    assert "fs.read" in err.value.message and "tools.allow" in err.value.message
    assert "\n" not in err.value.message


def test_globs_and_deny_wins(registry: ToolRegistry) -> None:
    policy = registry.for_agent(allow=["fs.*", "kb.search"], deny=["fs.patch"])
    assert [s["name"] for s in policy.schemas()] == ["fs.read", "kb.search"]
    assert policy.check("fs.read") is Approval.ALLOW
    with pytest.raises(ToolDenied, match=r"fs\.patch is denied by 'fs\.patch'"):
        policy.check("fs.patch")
    with pytest.raises(ToolDenied, match=r"os\.exec is not allowed.*fs\.\*, kb\.search"):
        policy.check("os.exec")


def test_unknown_tool_is_denied_even_when_a_glob_matches(registry: ToolRegistry) -> None:
    policy = registry.for_agent(allow=["*"])
    with pytest.raises(ToolDenied, match=r"fs\.delete is unknown") as err:
        policy.check("fs.delete")
    assert err.value.code == "tool.denied"
    assert err.value.detail["allow"] == ["*"]


def test_approval_defaults(registry: ToolRegistry) -> None:
    policy = registry.for_agent(allow=["*"])
    assert policy.check("fs.patch") is Approval.ASK
    assert policy.check("os.exec") is Approval.ALLOW
    assert policy.check("fs.read") is Approval.ALLOW


def test_approval_exact_beats_glob_and_specific_beats_general(registry: ToolRegistry) -> None:
    approval = {"*": Approval.ASK, "fs.*": Approval.ALLOW, "fs.patch": Approval.ALLOW}
    policy = registry.for_agent(allow=["*"], approval=approval)
    assert policy.check("fs.patch") is Approval.ALLOW  # exact name over every glob
    assert policy.check("fs.read") is Approval.ALLOW  # fs.* is more specific than *
    assert policy.check("os.exec") is Approval.ASK  # only * matches
    # Order in the mapping does not matter for specificity.
    flipped = registry.for_agent(allow=["*"], approval={"fs.*": Approval.ASK, "*": Approval.ALLOW})
    assert flipped.check("fs.read") is Approval.ASK
    assert flipped.check("kb.search") is Approval.ALLOW


def test_approval_deny_hides_the_tool(registry: ToolRegistry) -> None:
    policy = registry.for_agent(allow=["*"], approval={"os.*": Approval.DENY})
    assert "os.exec" not in [s["name"] for s in policy.schemas()]
    with pytest.raises(ToolDenied, match="approval 'deny'"):
        policy.check("os.exec")


# --- calls --------------------------------------------------------------------------


async def test_sync_tool_runs_in_a_thread(registry: ToolRegistry, ctx: ToolContext) -> None:
    seen: list[int] = []

    @tool("x.where")
    def where() -> int:
        seen.append(threading.get_ident())
        return 1

    assert await where.call({}, ctx) == 1
    assert seen and seen[0] != threading.get_ident()
    policy = registry.for_agent(allow=["fs.*"])
    result = await policy.call("fs.read", {"path": "a.txt", "limit": "10"}, ctx)
    assert result == f"{ctx.cwd}:a.txt:text:10"


async def test_async_tool(registry: ToolRegistry, ctx: ToolContext) -> None:
    policy = registry.for_agent(allow=["os.exec"])
    assert await policy.call("os.exec", {"cmd": "make"}, ctx) == "ran make for proj/dev"


async def test_call_of_a_denied_tool_does_not_run(registry: ToolRegistry, ctx: ToolContext) -> None:
    ran: list[bool] = []

    @tool("x.boom")
    def boom() -> None:
        ran.append(True)

    policy = ToolRegistry([boom]).for_agent(allow=["fs.*"])
    with pytest.raises(ToolDenied):
        await policy.call("x.boom", {}, ctx)
    assert ran == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "path"),
        ({"path": "a", "mode": "hex"}, "mode"),
        ({"path": "a", "limit": "many"}, "limit"),
        ({"path": "a", "extra": 1}, "extra"),
    ],
)
async def test_bad_arguments_name_the_field(
    registry: ToolRegistry, ctx: ToolContext, args: dict[str, object], field: str
) -> None:
    policy = registry.for_agent(allow=["fs.read"])
    with pytest.raises(BadRequest) as err:
        await policy.call("fs.read", args, ctx)
    assert err.value.code == "bad_request"
    assert err.value.detail["field"] == field
    assert f"argument {field}" in err.value.message


async def test_nested_field_path(ctx: ToolContext) -> None:
    with pytest.raises(BadRequest) as err:
        await os_exec.call({"cmd": "x", "env": ["A", 3]}, ctx)
    assert err.value.detail["field"] == "env.1"


async def test_async_timeout(ctx: ToolContext) -> None:
    never = asyncio.Event()

    @tool("x.hang", timeout_s=0.05)
    async def hang() -> None:
        await never.wait()

    with pytest.raises(RpcTimeout, match=r"x\.hang timed out after 0\.05 s") as err:
        await hang.call({}, ctx)
    assert err.value.code == "timeout"


async def test_sync_timeout(ctx: ToolContext) -> None:
    release = threading.Event()

    @tool("fs.slow")
    def slow() -> None:
        release.wait(10)

    try:
        with pytest.raises(RpcTimeout):
            await slow.call({}, ctx, timeout_s=0.05)
    finally:
        release.set()


async def test_a_tools_own_timeout_error_is_not_ours(ctx: ToolContext) -> None:
    @tool("x.own")
    async def own() -> None:
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream"):
        await own.call({}, ctx)


# --- registry and plugins -----------------------------------------------------------


def test_duplicate_names_are_refused(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(fs_read)
    assert len(registry) == 4
    assert [t.name for t in registry] == ["fs.patch", "fs.read", "kb.search", "os.exec"]


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "ateam_test_plugin.py").write_text(
        textwrap.dedent(
            '''
            from ateam.tools import tool

            @tool("demo.echo")
            def echo(text: str) -> str:
                """Echo text back."""
                return text

            @tool("demo.upper")
            def upper(text: str) -> str:
                return text.upper()

            @tool("demo.lower")
            def lower(text: str) -> str:
                return text.lower()

            @tool("demo.echo")
            def echo_again(text: str) -> str:
                return text

            MORE = [upper, lower]
            CLASHING = [tool("demo.other")(lower.fn), echo_again]
            NOT_A_TOOL = 42

            def make():
                return tool("demo.made")(lambda: "made")

            class Opaque:
                pass

            @tool("demo.opaque")
            def opaque(thing: Opaque) -> str:
                return "no schema for its argument"
            '''
        )
    )
    (site / "ateam_test_broken_plugin.py").write_text("raise RuntimeError('plugin exploded')\n")
    dist = site / "ateam_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ateam-test-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """
            [ateam.tools]
            single = ateam_test_plugin:echo
            many = ateam_test_plugin:MORE
            factory = ateam_test_plugin:make
            wrong = ateam_test_plugin:NOT_A_TOOL
            broken = ateam_test_broken_plugin:anything
            clash = ateam_test_plugin:CLASHING
            uncheckable = ateam_test_plugin:opaque

            [ateam.other]
            ignored = ateam_test_plugin:echo
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in ("ateam_test_plugin", "ateam_test_broken_plugin"):
        sys.modules.pop(name, None)


def test_entry_point_plugins(plugin_site: Path) -> None:
    registry = ToolRegistry()
    warnings = registry.load_entry_points()
    names = {t.name for t in registry}
    assert {"demo.echo", "demo.upper", "demo.lower", "demo.made"} <= names
    assert all(isinstance(t, Tool) for t in registry)
    joined = "\n".join(warnings)
    assert len(warnings) == 4, warnings
    # "clash" reuses demo.echo: reported, not fatal, and none of its tools registered.
    assert "clash" in joined and "already registered: demo.echo" in joined
    assert "demo.other" not in names
    assert "wrong" in joined and "int" in joined
    assert "broken" in joined and "plugin exploded" in joined
    assert "ateam-test-plugin" in joined
    # Its argument type has no schema: found at loading (arguments models are built at
    # first use, but a plugin's is built as it loads), not at its first call.
    assert "uncheckable" in joined and "Opaque" in joined
    assert "demo.opaque" not in names
    # Plugins are still denied until an agent allows them.
    with pytest.raises(ToolDenied):
        registry.for_agent(allow=["fs.*"]).check("demo.echo")
    assert registry.for_agent(allow=["demo.*"]).check("demo.echo") is Approval.ALLOW


def test_entry_points_of_an_empty_group(plugin_site: Path) -> None:
    registry = ToolRegistry()
    assert registry.load_entry_points(group="ateam.nothing") == []
    assert len(registry) == 0
