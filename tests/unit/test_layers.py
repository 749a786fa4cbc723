"""The layering of ``ateam/``, checked on the source: front ends stand on the client,
``tools/`` imports nothing above it, no import runs up the floors, and no modules
import each other in a circle.

Every import counts: at module level, inside functions (lazy imports) and under
``TYPE_CHECKING`` — a lazy import runs back up the layers just the same.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ateam"

FRONT_ENDS = ("cli", "console", "mcp")
"""Front ends, relative to ``ateam/``: they talk to the bus only through ``ateam.client``."""
ABOVE_TOOLS = ("ateam.agent", "ateam.console", "ateam.client", "ateam.fleet", "ateam.cli")
"""What ``tools/`` must not import: everything that stands on it."""


@dataclass(frozen=True)
class Import:
    """One imported module, where it is imported."""

    module: str
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(PACKAGE.parent)}:{self.line} imports {self.module}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: dict[str, Path]) -> Iterator[Import]:
    """Every ``ateam`` module the file at ``path`` imports, anywhere in it."""
    source = path.read_text(encoding="utf-8")
    for module, line in imports_in(source, module_name(path), path.name == "__init__.py", known):
        yield Import(module, path, line)


def imports_in(
    source: str, name: str, is_package: bool, known: dict[str, Path]
) -> Iterator[tuple[str, int]]:
    """``(module, line)`` of every import in ``source``, the text of module ``name``.

    ``from ateam.x import y`` is an import of ``ateam.x.y`` when that is a module, else
    of ``ateam.x``; relative imports are resolved against the module's package.
    """
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in known else base), node.lineno


def files_under(*relative: str) -> list[Path]:
    found: list[Path] = []
    for item in relative:
        path = PACKAGE / item
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(path.rglob("*.py")))
    return found


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_front_end_imports_the_bus() -> None:
    known = all_modules()
    bad = sorted(
        {
            found.where()
            for path in files_under(*FRONT_ENDS)
            for found in imports_of(path, known)
            if within(found.module, "ateam.bus")
        }
    )
    assert not bad, "front ends must use ateam.client, not the bus:\n" + "\n".join(bad)


def test_the_check_sees_every_form_of_import() -> None:
    """``import``, ``from … import``, ``from ateam import bus``, relative, typing-only, lazy."""
    source = (
        "import ateam.bus.events\n"
        "from ateam.bus.rpc import RpcClient\n"
        "from ateam import bus\n"
        "from ..bus import codec\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ateam.bus import Keys\n"
        "def later():\n"
        "    import ateam.bus\n"
    )
    found = sorted(imports_in(source, "ateam.console.probe", False, all_modules()), key=_line)
    assert [module for module, _ in found if within(module, "ateam.bus")] == [
        "ateam.bus.events",
        "ateam.bus.rpc",
        "ateam.bus",
        "ateam.bus.codec",
        "ateam.bus",
        "ateam.bus",
    ]


def _line(found: tuple[str, int]) -> int:
    return found[1]


def test_tools_import_nothing_above_them() -> None:
    known = all_modules()
    bad = sorted(
        {
            found.where()
            for path in files_under("tools")
            for found in imports_of(path, known)
            if any(within(found.module, above) for above in ABOVE_TOOLS)
        }
    )
    assert not bad, "tools/ must import nothing above it:\n" + "\n".join(bad)


LAYERS: tuple[tuple[str, ...], ...] = (
    ("ateam.__main__",),
    ("ateam.cli",),
    ("ateam.console", "ateam.mcp"),
    ("ateam.fleet",),
    ("ateam.client", "ateam.agent", "ateam.supervisor"),
    ("ateam.kb", "ateam.bus"),
    ("ateam.tools", "ateam.providers", "ateam.redact", "ateam.worktrees"),
    (
        "ateam.config",
        "ateam.wire",
        "ateam.exits",
        "ateam._jsonl",
        "ateam._net",
        "ateam._token",
        "ateam._entry_points",
    ),
    (
        "ateam.errors",
        "ateam.constants",
        "ateam.paths",
        "ateam._fs",
        "ateam._proc",
        "ateam._scan",
    ),
    ("ateam._json", "ateam._lazy"),
    ("ateam._cmdline", "ateam._gc", "ateam._telemetry_off"),
    ("ateam.completion",),
)
"""The floors of the house, top first (docs/architecture.md draws them). A module may
import its own package and anything on a lower floor, never a higher one and never a
sideways package on its own floor."""


AGENT_FLOORS: tuple[tuple[str, ...], ...] = (
    ("ateam.agent.runtime",),
    ("ateam.agent.native", "ateam.agent.acp"),
    ("ateam.agent.loop",),
    ("ateam.agent.context",),
    ("ateam.agent.models",),
    ("ateam.agent.state",),
)
"""The floors inside ``ateam/agent/``, top first: the process and its faces; the task
runners side by side, each in its own package (ateam's native loop, and the ACP loop
that drives coding agents), neither importing the other; the work loop, which knows a
runner only by :mod:`ateam.agent.loop.task`'s protocol; what the model sees; which
model; what is kept on disk."""

AGENT_TOP = ("ateam.agent",)
"""The only modules of ``ateam/agent/`` outside a floor: the package itself."""


def floor_of(module: str) -> tuple[int, str]:
    """(floor, package) of an ``ateam`` module (the package face ``ateam`` stands apart)."""
    for depth, packages in enumerate(LAYERS):
        for package in packages:
            if within(module, package):
                return depth, package
    return len(LAYERS), "ateam"


def test_every_module_has_a_floor() -> None:
    unplaced = [name for name in all_modules() if floor_of(name)[1] == "ateam" and name != "ateam"]
    assert not unplaced, f"add these to LAYERS: {unplaced}"


def test_no_import_runs_up_or_sideways() -> None:
    known = all_modules()
    bad = []
    for name, path in known.items():
        if name == "ateam":
            continue  # the package face: its version and root error, for every floor
        floor, package = floor_of(name)
        for found in imports_of(path, known):
            if found.module == "ateam" or not within(found.module, "ateam"):
                continue
            their_floor, their_package = floor_of(found.module)
            if their_floor < floor or (their_floor == floor and their_package != package):
                bad.append(found.where())
    assert not bad, "imports that run up (or across) the layers:\n" + "\n".join(sorted(bad))


def test_no_import_circle() -> None:
    known = all_modules()
    graph = {
        name: sorted({i.module for i in imports_of(path, known) if i.module in known} - {name})
        for name, path in known.items()
    }
    circles = [sorted(group) for group in strongly_connected(graph) if len(group) > 1]
    assert not circles, "modules of ateam/ import each other in a circle:\n" + "\n".join(
        " ⇄ ".join(group) for group in circles
    )


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(graph[step])))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def test_circles_are_found() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": []}
    assert [sorted(g) for g in strongly_connected(graph) if len(g) > 1] == [["a", "b", "c"]]


LONG_MODULE_LINES = 600
"""Past this a module says, in its docstring's first lines, why it stays one file."""


def test_a_long_module_says_why_it_is_long() -> None:
    unexplained = []
    for name, path in all_modules().items():
        source = path.read_text(encoding="utf-8")
        if source.count("\n") <= LONG_MODULE_LINES:
            continue
        opening = " ".join((ast.get_docstring(ast.parse(source)) or "").split("\n")[:6])
        if "on purpose" not in opening:
            unexplained.append(f"{name} ({source.count(chr(10))} lines)")
    assert not unexplained, f"long modules without a reason in their first lines: {unexplained}"


def test_the_lists_here_name_only_what_exists() -> None:
    # A list that names a moved or deleted path checks nothing about it, silently.
    modules = all_modules()
    missing = [f"FRONT_ENDS: {item}" for item in FRONT_ENDS if not (PACKAGE / item).exists()]
    named = [name for floor in LAYERS for name in floor] + list(ABOVE_TOOLS)
    named += [package for floor in AGENT_FLOORS for package in floor] + list(AGENT_TOP)
    missing += [f"LAYERS/ABOVE_TOOLS: {name}" for name in named if name not in modules]
    assert not missing, f"names of paths that do not exist: {missing}"


def test_agent_sub_packages_keep_their_floors() -> None:
    known = all_modules()
    agent = {name: path for name, path in known.items() if within(name, "ateam.agent")}
    loose = [name for name in agent if name not in AGENT_TOP and _agent_floor(name) is None]
    assert not loose, f"modules of ateam/agent/ outside its sub-packages: {loose}"
    bad = []
    for name, path in agent.items():
        floor = _agent_floor(name)
        for found in imports_of(path, known):
            theirs = _agent_floor(found.module)
            if floor is None or theirs is None:
                continue
            if theirs < floor or (theirs == floor and _package(found.module) != _package(name)):
                bad.append(found.where())
    assert not bad, "imports that run up ateam/agent/'s floors:\n" + "\n".join(sorted(bad))


def _agent_floor(module: str) -> int | None:
    for depth, packages in enumerate(AGENT_FLOORS):
        if any(within(module, package) for package in packages):
            return depth
    return None


def _package(module: str) -> str:
    return ".".join(module.split(".")[:3])


def test_the_agent_floors_check_finds_a_runner_imported_by_the_loop() -> None:
    # The loop must not name the native runner: that is the seam another runner uses.
    source = "from ateam.agent.native.runner import NativeRunner\n"
    found = [m for m, _ in imports_in(source, "ateam.agent.loop.worker", False, all_modules())]
    assert found == ["ateam.agent.native.runner"]
    assert _agent_floor(found[0]) < _agent_floor("ateam.agent.loop.worker")  # type: ignore[operator]


def test_the_agent_floors_check_finds_one_runner_importing_the_other() -> None:
    # The two runners share a floor: neither may lean on the other's package.
    source = "from ateam.agent.native.toolcall import describe_error\n"
    found = [m for m, _ in imports_in(source, "ateam.agent.acp.runner", False, all_modules())]
    assert found == ["ateam.agent.native.toolcall"]
    assert _agent_floor(found[0]) == _agent_floor("ateam.agent.acp.runner")
    assert _package(found[0]) != _package("ateam.agent.acp.runner")


MAX_MODULE_LINES = 800
"""No module of ``ateam/`` is longer: past this a file holds more than one idea."""


def test_no_module_is_over_the_limit() -> None:
    long = [
        f"{name} ({lines} lines)"
        for name, path in all_modules().items()
        if (lines := path.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
