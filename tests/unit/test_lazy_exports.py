"""The package faces that load their submodules at first use (ateam._lazy, PEP 562).

``ateam.bus``, ``ateam.client`` and ``ateam.config`` keep their names in three places:
the typed imports under ``if TYPE_CHECKING:`` (for mypy), the table their
``__getattr__`` loads from, and ``__all__``. These tests hold the three equal and check
that every name resolves, in a fresh interpreter, to the object its module defines.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import ateam
from ateam.config._files import PREPARE
from ateam.config.discovery import CONFIG_DIR, CONFIG_FILES, configured

LAZY_PACKAGES = ("ateam.bus", "ateam.client", "ateam.config", "ateam.kb")


def _typed_imports(package: str) -> dict[str, str]:
    """Name -> module of the ``from M import N`` lines under ``if TYPE_CHECKING:``."""
    path = Path(ateam.__file__).parent.parent / (package.replace(".", "/") + "/__init__.py")
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.unparse(stmt)
                found.update({alias.name: stmt.module for alias in stmt.names})
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_table_typed_imports_and_all_agree(package: str) -> None:
    module = importlib.import_module(package)
    table = {name: where for where, names in module._LAZY.items() for name in names}

    assert table == _typed_imports(package)
    assert sorted(module.__all__) == sorted(table)
    assert set(module.__all__) <= set(dir(module))


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_name_resolves_in_a_fresh_interpreter(package: str) -> None:
    # This session imported everything long ago; a fresh one starts from nothing.
    program = (
        f"import importlib, {package} as p\n"
        "for where, names in p._LAZY.items():\n"
        "    for name in names:\n"
        "        value = getattr(p, name)\n"
        "        assert value is getattr(importlib.import_module(where), name), name\n"
        f"from {package} import *\n"
        "print(len(p.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)

    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(importlib.import_module(package).__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import ateam.client

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        ateam.client.Nope  # noqa: B018
    assert not hasattr(ateam.bus, "Nope")


def test_configured_knows_every_file_the_loader_reads() -> None:
    assert sorted(CONFIG_FILES) == sorted(PREPARE)


def test_configured_is_false_only_where_loading_gives_the_defaults(
    tmp_path: Path, isolated_home: Path
) -> None:
    # isolated_home is ATEAM_HOME (~/.ateam): state there, no configuration.
    (isolated_home / "run").mkdir()
    assert not configured(tmp_path)

    (isolated_home / "tools.yaml").write_text("transport: {namespace: 'x:'}\n")
    assert configured(tmp_path)  # user-wide settings apply everywhere
    (isolated_home / "tools.yaml").unlink()

    project = tmp_path / "p"
    (project / CONFIG_DIR).mkdir(parents=True)
    assert configured(project)  # a project directory, even an empty one
    assert not configured(tmp_path)


def test_where_nothing_is_configured_no_project_means_the_same_bus(
    tmp_path: Path, isolated_home: Path
) -> None:
    # A verb skips the load where configured() is False: the project it would have
    # loaded must name the very bus that no project names, and mask nothing more.
    from ateam.bus.connection import resolve_target
    from ateam.config.loader import load_project

    assert not configured(tmp_path)
    loaded = load_project(tmp_path)
    url = "redis://127.0.0.1:1/0"

    assert loaded.root is None and not loaded.redact_patterns
    assert resolve_target(url, transport=loaded.transport, namespace=loaded.namespace) == (
        resolve_target(url)
    )
