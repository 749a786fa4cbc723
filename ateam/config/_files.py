"""Reading one ``.ateam/`` file: YAML into a mapping, and what each file needs done
while its origin is still known (paths resolved against its directory, ids unique within
it, patterns that compile), before the loader merges it with the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from ateam.config.layers import kind_of as _kind
from ateam.config.layers import one_line as _one_line
from ateam.errors import ConfigError

__all__ = ["PREPARE", "read_yaml", "resolve_path"]


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse one file into a mapping with empty (null) values removed."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise ConfigError(f"invalid YAML{where}: {_one_line(problem)}", file=str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {_one_line(str(exc))}", file=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"the top level must be a mapping, not {_kind(data)}", file=str(path))
    return _drop_nulls(data)


def _drop_nulls(data: dict[str, Any]) -> dict[str, Any]:
    # `key:` with nothing after it (typically every child commented out) means "not set",
    # so it neither overrides a farther file nor fails validation as a null section.
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [clean(item) for item in value]
        return value

    cleaned: dict[str, Any] = clean(data)
    return cleaned


def resolve_path(base: Path, value: str | Path) -> Path:
    path = Path(value).expanduser()
    return (path if path.is_absolute() else base / path).resolve()


def _resolve_model_scripts(path: Path, raw: dict[str, Any]) -> None:
    # Resolved before merging: after it nobody knows which .ateam/ an entry came from.
    _check_unique(path, raw, "models", "id")
    entries = raw.get("models")
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and isinstance(entry.get("script"), str):
            entry["script"] = str(resolve_path(path.parent, entry["script"]))


def _resolve_ca_file(path: Path, raw: dict[str, Any]) -> None:
    transport = raw.get("transport")
    for name in ("ca_file", "cert_file", "key_file"):  # the TLS files
        if isinstance(transport, dict) and isinstance(transport.get(name), str):
            transport[name] = str(resolve_path(path.parent, transport[name]))


def _check_redact_file(path: Path, raw: dict[str, Any]) -> None:
    _check_unique(path, raw, "patterns", "name")
    # A pattern that does not compile is found here, while the file is known: the
    # merged layers the schema checks later no longer say which file or line it was.
    items = raw.get("patterns")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        regex = item.get("regex") if isinstance(item, dict) else None
        if not isinstance(regex, str):
            continue
        try:
            re.compile(regex)
        except re.error as exc:
            line = _line_of(path, ("patterns", index, "regex"))
            where = f" at line {line}" if line is not None else ""
            raise ConfigError(
                f"invalid regular expression{where}: {exc}",
                file=str(path),
                field=f"patterns[{index}].regex",
            ) from None


def _line_of(path: Path, keys: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML value at ``keys`` in ``path``; ``None`` if not found."""
    try:
        node: yaml.Node | None = yaml.compose(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    for key in keys:
        if isinstance(node, yaml.MappingNode) and isinstance(key, str):
            node = next((v for k, v in node.value if k.value == key), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
            node = node.value[key] if key < len(node.value) else None
        else:
            return None
    return node.start_mark.line + 1 if node is not None else None


def _check_unique(path: Path, raw: dict[str, Any], list_key: str, id_key: str) -> None:
    # Across files a repeated id is an override; inside one file it is a mistake that
    # the de-duplication would otherwise hide.
    items = raw.get(list_key)
    seen: dict[Any, int] = {}
    for index, item in enumerate(items if isinstance(items, list) else ()):
        ident = item.get(id_key) if isinstance(item, dict) else None
        if not isinstance(ident, str):
            continue
        if ident in seen:
            raise ConfigError(
                f"duplicate {id_key} {ident!r} (first at {list_key}[{seen[ident]}])",
                file=str(path),
                field=f"{list_key}[{index}].{id_key}",
            )
        seen[ident] = index


def _nothing(path: Path, raw: dict[str, Any]) -> None:
    return None


PREPARE: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    "project.yaml": _nothing,
    "models.yaml": _resolve_model_scripts,
    "tools.yaml": _resolve_ca_file,
    "redact.yaml": _check_redact_file,
}
"""The merged files, and what each needs done while its origin is still known."""
