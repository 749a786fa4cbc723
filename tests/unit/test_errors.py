"""The error catalogue: one code per meaning, declared once; exit statuses written once."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import ateam.errors as errors
from ateam.errors import (
    AteamError,
    BadRequest,
    Code,
    StorageError,
    StorageIoError,
    UsageError,
)
from ateam.exits import AGENT_EXIT, CLI_EXIT, Exit, agent_exit_code, cli_exit_code

PACKAGE = Path(errors.__file__).resolve().parent


def error_classes() -> list[type[AteamError]]:
    return [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, AteamError)
    ]


def test_every_code_is_declared_by_one_class() -> None:
    declared: dict[str, list[str]] = {}
    for cls in error_classes():
        if "code" in vars(cls):
            declared.setdefault(str(vars(cls)["code"]), []).append(cls.__name__)
    twice = {code: names for code, names in declared.items() if len(names) > 1}
    assert not twice, f"codes declared by more than one class: {twice}"


def test_a_malformed_request_is_one_meaning_whoever_refused_it() -> None:
    assert issubclass(BadRequest, UsageError)
    assert BadRequest("x").code == UsageError("x").code == Code.BAD_REQUEST
    assert cli_exit_code(BadRequest("x")) == cli_exit_code(UsageError("x")) == Exit.USAGE


def test_an_io_failure_is_not_a_bad_request() -> None:
    error = StorageIoError("cannot write plan.md: No space left on device")
    assert isinstance(error, StorageError) and error.code == "storage.io"
    assert error.code != Code.BAD_REQUEST


def test_exit_tables_hold_exit_members_only() -> None:
    for table in (CLI_EXIT, AGENT_EXIT):
        assert all(isinstance(status, Exit) for status in table.values())
    assert agent_exit_code(AteamError("x")) == cli_exit_code(AteamError("x")) == Exit.FAILED


def test_no_exit_status_is_written_as_a_bare_number() -> None:
    # `return 4` or `sys.exit(12)` would be a second place an exit status is written.
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            value = None
            if isinstance(node, ast.Return) and node.value is not None:
                value = node.value
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "exit":
                value = node.args[0] if node.args else None
            if isinstance(value, ast.Constant) and type(value.value) is int and value.value:
                if _in_command_function(tree, node):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, f"exit statuses written as numbers: {found}"


def _in_command_function(tree: ast.Module, target: ast.AST) -> bool:
    """Whether ``target`` is inside a function whose result is an exit status."""
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        name = func.name
        is_command = name.startswith(("cmd_", "_cmd_", "main", "run_", "server_command"))
        if is_command and any(node is target for node in ast.walk(func)):
            return True
    return False
