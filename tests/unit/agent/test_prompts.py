"""The system prompt (SPEC §5.6): assembly, protected blocks, overlay edits, reloads."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.context.prompts import Prompts, check_edit, find_blocks
from ateam.errors import BadRequest, PromptProtectedViolation

BASE = """You are zeus, a careful engineer.

<!-- ateam-protect:start:safety -->
Never force-push.
<!-- ateam-protect:end:safety -->
"""

OVERLAY = """Prefer small commits.
<!-- ateam-protect:start:style -->
Use British spelling.
<!-- ateam-protect:end:style -->
Be brief.
"""

TOOLS: list[dict[str, Any]] = [
    {"name": "fs.read", "description": "Read a file.\n\nLonger text.", "parameters": {}},
    {"name": "os.exec", "description": "Run a command in a terminal.", "parameters": {}},
]

MakePrompts = Callable[..., Prompts]


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    path = tmp_path / "agents" / "zeus"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def base_path(agent_dir: Path) -> Path:
    return agent_dir / "system_base.md"


@pytest.fixture
def overlay_path(agent_dir: Path) -> Path:
    return agent_dir / "system_overlay.md"


@pytest.fixture
def make_prompts(base_path: Path, overlay_path: Path) -> MakePrompts:
    """Writes the given files (``None`` leaves one missing) and loads a Prompts on them."""

    def factory(
        base: str | None = BASE, overlay: str | None = OVERLAY, toolbox: Any = lambda: TOOLS
    ) -> Prompts:
        if base is not None:
            base_path.write_text(base, encoding="utf-8")
        if overlay is not None:
            overlay_path.write_text(overlay, encoding="utf-8")
        prompts = Prompts(base_path, overlay_path, agent_id="proj/zeus", toolbox=toolbox)
        prompts.load()
        return prompts

    return factory


def edit_on_disk(path: Path, text: str) -> None:
    """Rewrite ``path`` in place, as an editor outside ateam would, with a visibly newer
    mtime so the test does not depend on the file system's timestamp granularity."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    newer = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(newer, newer))


def snapshot(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_ino, st.st_mtime_ns


# assembly -----------------------------------------------------------------------------


def test_effective_is_base_then_overlay_then_toolbox(make_prompts: MakePrompts) -> None:
    text = make_prompts().effective()
    base_at = text.index("You are zeus, a careful engineer.")
    overlay_at = text.index("Prefer small commits.")
    tools_at = text.index("- fs.read: Read a file.")
    assert base_at < overlay_at < tools_at < text.index("- os.exec: Run a command in a terminal.")
    assert "Longer text." not in text  # one line per tool
    assert "Never force-push." in text and "Use British spelling." in text
    assert "\n\n" in text[text.index("<!-- ateam-protect:end:safety -->") : overlay_at]


def test_toolbox_as_a_list_and_as_a_callable(make_prompts: MakePrompts) -> None:
    tools = list(TOOLS)
    as_list = make_prompts(toolbox=tools).effective()
    assert "- os.exec:" in as_list
    live = make_prompts(toolbox=lambda: tools)
    tools.append({"name": "kb.search", "description": "Search the knowledge base."})
    assert "- kb.search: Search the knowledge base." in live.effective()


@pytest.mark.parametrize(
    ("base", "overlay", "expected_start"),
    [
        (None, None, "You are proj/zeus, a coding agent."),
        ("", "   \n", "You are proj/zeus, a coding agent."),
        (None, "Only the overlay.\n", "Only the overlay."),
        ("Only the base.\n", None, "Only the base."),
    ],
)
def test_missing_or_empty_files(
    make_prompts: MakePrompts, base: str | None, overlay: str | None, expected_start: str
) -> None:
    prompts = make_prompts(base=base, overlay=overlay, toolbox=list)
    assert prompts.effective() == expected_start
    assert prompts.last_warning is None


def test_no_tools_no_toolbox_section(make_prompts: MakePrompts) -> None:
    text = make_prompts(toolbox=list).effective()
    assert "Tools" not in text
    assert text.endswith("Be brief.")


# the console's "# text" ---------------------------------------------------------------


def test_append_reaches_effective_and_disk(make_prompts: MakePrompts, overlay_path: Path) -> None:
    prompts = make_prompts()
    prompts.append_overlay("  Always run the tests.  ")
    assert overlay_path.read_text() == OVERLAY + "Always run the tests.\n"
    assert prompts.overlay_text() == OVERLAY + "Always run the tests.\n"
    text = prompts.effective()
    assert text.index("Be brief.") < text.index("Always run the tests.") < text.index("- fs.read")


def test_append_creates_a_private_file(make_prompts: MakePrompts, overlay_path: Path) -> None:
    prompts = make_prompts(overlay=None)
    prompts.append_overlay("first line")
    assert overlay_path.read_text() == "first line\n"
    assert stat.S_IMODE(overlay_path.stat().st_mode) == 0o600
    prompts.append_overlay("second line")
    assert overlay_path.read_text() == "first line\nsecond line\n"


def test_append_is_atomic_and_keeps_the_mode(
    make_prompts: MakePrompts, overlay_path: Path, agent_dir: Path
) -> None:
    prompts = make_prompts(overlay="no newline at the end")
    overlay_path.chmod(0o644)
    inode = overlay_path.stat().st_ino
    prompts.append_overlay("added")
    assert overlay_path.read_text() == "no newline at the end\nadded\n"
    # A new inode: the file was replaced by a rename, never rewritten in place.
    assert overlay_path.stat().st_ino != inode
    assert stat.S_IMODE(overlay_path.stat().st_mode) == 0o644
    assert sorted(p.name for p in agent_dir.iterdir()) == ["system_base.md", "system_overlay.md"]


@pytest.mark.parametrize("line", ["one\ntwo", "one\r\ntwo", "one\u2028two", "", "   "])
def test_append_rejects_multi_line_or_empty(
    make_prompts: MakePrompts, overlay_path: Path, line: str
) -> None:
    prompts = make_prompts()
    before = snapshot(overlay_path)
    version = prompts.version
    with pytest.raises(BadRequest):
        prompts.append_overlay(line)
    assert snapshot(overlay_path) == before
    assert prompts.version == version


def test_append_refuses_a_line_that_opens_a_block(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    prompts = make_prompts()
    before = snapshot(overlay_path)
    with pytest.raises(PromptProtectedViolation, match="'x'"):
        prompts.append_overlay("<!-- ateam-protect:start:x -->")
    assert snapshot(overlay_path) == before


def test_append_keeps_an_unseen_valid_disk_edit(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    prompts = make_prompts()
    edit_on_disk(overlay_path, "Edited by hand.\n" + OVERLAY)
    prompts.append_overlay("typed")
    assert overlay_path.read_text() == "Edited by hand.\n" + OVERLAY + "typed\n"
    assert "Edited by hand." in prompts.effective()
    assert not prompts.changed_on_disk()


def test_append_refuses_when_the_disk_edit_breaks_a_block(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    prompts = make_prompts()
    broken = OVERLAY.replace("British", "American")
    edit_on_disk(overlay_path, broken)
    with pytest.raises(PromptProtectedViolation, match=r"outside ateam.*'style'"):
        prompts.append_overlay("typed")
    assert overlay_path.read_text() == broken  # the user's edit is not clobbered
    assert "British" in prompts.effective()


# /sys edit and protected blocks ---------------------------------------------------------


@pytest.mark.parametrize(
    ("new", "problem"),
    [
        ("Prefer small commits.\nBe brief.\n", "removed"),
        (OVERLAY.replace("British", "American"), "changed"),
        (OVERLAY.replace("start:style -->", "start:style  -->"), "changed"),
        (OVERLAY.replace(":style -->", ":tone -->"), "renamed"),
        (OVERLAY.replace("<!-- ateam-protect:end:style -->\n", ""), "unclosed"),
        (OVERLAY.replace("<!-- ateam-protect:start:style -->\n", ""), "stray_end"),
    ],
)
def test_set_overlay_refuses_touching_a_block(
    make_prompts: MakePrompts, overlay_path: Path, new: str, problem: str
) -> None:
    prompts = make_prompts()
    before, version = snapshot(overlay_path), prompts.version
    with pytest.raises(PromptProtectedViolation) as info:
        prompts.set_overlay(new)
    assert info.value.code == "prompt.protected_violation"
    assert info.value.detail["block"] == "style"
    assert info.value.detail["problem"] == problem
    assert "'style'" in info.value.message
    assert snapshot(overlay_path) == before
    assert prompts.overlay_text() == OVERLAY
    assert prompts.version == version


def test_set_overlay_may_add_and_move_blocks(make_prompts: MakePrompts, overlay_path: Path) -> None:
    prompts = make_prompts()
    style = OVERLAY[OVERLAY.index("<!--") : OVERLAY.index("Be brief.")]
    new = (
        style
        + "Be brief.\n<!-- ateam-protect:start:review.v2 -->\nAsk for review.\n"
        + "<!-- ateam-protect:end:review.v2 -->\n"
    )
    prompts.set_overlay(new)
    assert overlay_path.read_text() == new
    assert "Ask for review." in prompts.effective()
    assert "Prefer small commits." not in prompts.effective()
    # The new block is now protected in its turn.
    with pytest.raises(PromptProtectedViolation, match=re.escape("'review.v2'")):
        prompts.set_overlay(style)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("<!-- ateam-protect:start:a -->\nx\n", "a"),
        ("x\n<!-- ateam-protect:end:a -->\n", "a"),
        (
            "<!-- ateam-protect:start:a -->\n<!-- ateam-protect:start:a -->\n"
            "<!-- ateam-protect:end:a -->\n",
            "a",
        ),
        (
            "<!-- ateam-protect:start:a -->1<!-- ateam-protect:end:a -->\n"
            "<!-- ateam-protect:start:a -->2<!-- ateam-protect:end:a -->\n",
            "a",
        ),
        (
            "<!-- ateam-protect:start:a -->\n<!-- ateam-protect:start:b -->\n"
            "<!-- ateam-protect:end:a -->\n<!-- ateam-protect:end:b -->\n",
            "b",
        ),
        ("<!-- ateam-protect:start:bad name -->\n", "<!-- ateam-protect:start:bad name -->"),
    ],
)
def test_malformed_markers_are_refused(
    make_prompts: MakePrompts, overlay_path: Path, text: str, name: str
) -> None:
    with pytest.raises(PromptProtectedViolation) as info:
        find_blocks(text)
    assert info.value.detail["block"] == name
    with pytest.raises(PromptProtectedViolation):
        check_edit("", text)
    prompts = make_prompts()
    before = snapshot(overlay_path)
    with pytest.raises(PromptProtectedViolation):
        prompts.set_overlay(OVERLAY + text)
    assert snapshot(overlay_path) == before


def test_find_blocks_spans_and_nesting() -> None:
    text = "intro\n" + OVERLAY + "<!-- ateam-protect:start:outer -->o<!-- ateam-protect:start:in"
    text += "ner -->i<!-- ateam-protect:end:inner --><!-- ateam-protect:end:outer -->"
    blocks = find_blocks(text)
    assert set(blocks) == {"style", "outer", "inner"}
    style = blocks["style"]
    assert text[style.start : style.end] == style.text
    assert style.text.startswith("<!-- ateam-protect:start:style -->")
    assert style.text.endswith("<!-- ateam-protect:end:style -->")
    assert blocks["inner"].text in blocks["outer"].text
    # Changing the inner block changes the outer one too; both are protected.
    with pytest.raises(PromptProtectedViolation, match=r"'outer'|'inner'"):
        check_edit(text, text.replace("-->i<", "-->I<"))


def test_a_malformed_overlay_at_start_is_kept_and_reported(make_prompts: MakePrompts) -> None:
    broken = OVERLAY + "<!-- ateam-protect:start:dangling -->\n"
    prompts = make_prompts(overlay=broken)
    assert prompts.last_warning is not None and "'dangling'" in prompts.last_warning
    assert prompts.overlay_text() == broken
    # The inherited malformation does not block "# text"; the good block stays protected.
    prompts.append_overlay("still usable")
    with pytest.raises(PromptProtectedViolation, match="'style'"):
        prompts.set_overlay(broken.replace("British", "American"))


# show -------------------------------------------------------------------------------


def test_show_labels_the_parts_and_marks_protected_blocks(
    make_prompts: MakePrompts, base_path: Path, overlay_path: Path
) -> None:
    shown = make_prompts().show()
    lines = shown.splitlines()
    assert lines[0] == f"─── base: {base_path} ───"
    assert f"─── overlay: {overlay_path} ───" in lines
    assert "─── toolbox (generated) ───" in lines
    assert lines.index(f"─── overlay: {overlay_path} ───") < lines.index(
        "─── toolbox (generated) ───"
    )
    # The base file's block is framed and every line of it carries the gutter.
    assert "┌ protected: safety" in lines
    assert "│ Never force-push." in lines
    assert "│ <!-- ateam-protect:end:safety -->" in lines
    assert "└ end: safety" in lines
    assert "│ Use British spelling." in lines
    assert "You are zeus, a careful engineer." in lines  # unprotected lines stay plain
    assert "- fs.read: Read a file." in lines


def test_show_without_files(make_prompts: MakePrompts) -> None:
    shown = make_prompts(base=None, overlay=None, toolbox=list).show()
    assert "default used" in shown
    assert "You are proj/zeus, a coding agent." in shown
    assert "(no tools)" in shown


# reloads -------------------------------------------------------------------------------


def test_on_disk_edit_is_picked_up(
    make_prompts: MakePrompts, base_path: Path, overlay_path: Path
) -> None:
    prompts = make_prompts()
    assert not prompts.changed_on_disk()
    edit_on_disk(overlay_path, OVERLAY + "Hand-written rule.\n")
    assert prompts.changed_on_disk()
    assert "Hand-written rule." not in prompts.effective()  # only a reload applies it
    result = prompts.reload()
    assert result.changed and result.refused is None
    assert "Hand-written rule." in prompts.effective()
    assert not prompts.changed_on_disk()

    # The base may be edited on disk freely, even its protected blocks.
    edit_on_disk(base_path, BASE.replace("force-push", "push --force"))
    assert prompts.changed_on_disk()
    assert prompts.reload() == type(result)(changed=True, refused=None)
    assert "push --force" in prompts.effective()


def test_created_and_deleted_files_are_noticed(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    prompts = make_prompts(overlay=None)
    edit_on_disk(overlay_path, "New overlay.\n")
    assert prompts.changed_on_disk()
    assert prompts.reload().changed
    assert "New overlay." in prompts.effective()
    overlay_path.unlink()
    assert prompts.changed_on_disk()
    assert prompts.reload().changed
    assert "New overlay." not in prompts.effective()


def test_reload_refuses_a_disk_edit_that_breaks_a_block(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    prompts = make_prompts()
    accepted = prompts.effective()
    version = prompts.version
    broken = OVERLAY.replace("British", "American") + "Another rule.\n"
    edit_on_disk(overlay_path, broken)
    result = prompts.reload()
    assert not result.changed
    assert result.refused is not None and "'style'" in result.refused
    assert "\n" not in result.refused
    assert prompts.last_warning == result.refused
    assert prompts.effective() == accepted  # the broken edit never reaches the model
    assert prompts.overlay_text() == OVERLAY
    assert prompts.version == version
    assert overlay_path.read_text() == broken  # the user's file is left for them to fix
    assert "(!) on-disk edit refused" in prompts.show()
    # Polling does not refuse the same file again every second.
    assert not prompts.changed_on_disk()

    # Deleting the file is a removal of the block as well.
    overlay_path.unlink()
    assert "'style'" in str(prompts.reload().refused)

    # Once fixed, the edit goes through.
    edit_on_disk(overlay_path, OVERLAY + "Another rule.\n")
    fixed = prompts.reload()
    assert fixed.changed and fixed.refused is None
    assert "Another rule." in prompts.effective()
    assert prompts.version == version + 1
    assert "(!)" not in prompts.show()


def test_own_writes_do_not_look_like_disk_edits(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    prompts = make_prompts()
    prompts.append_overlay("typed")
    assert not prompts.changed_on_disk()
    prompts.set_overlay(OVERLAY + "saved from the editor\n")
    assert not prompts.changed_on_disk()
    assert prompts.reload().changed is False


def test_version_counts_changes_of_the_effective_prompt(
    make_prompts: MakePrompts, overlay_path: Path
) -> None:
    tools = list(TOOLS)
    prompts = make_prompts(toolbox=lambda: tools)
    first = prompts.version
    assert first >= 1
    prompts.append_overlay("one")
    assert prompts.version == first + 1
    prompts.set_overlay(prompts.overlay_text())  # same text: nothing changed
    assert prompts.version == first + 1
    edit_on_disk(overlay_path, OVERLAY)
    assert prompts.reload().changed
    assert prompts.version == first + 2
    assert not prompts.reload().changed
    assert prompts.version == first + 2
    tools.pop()
    assert prompts.version == first + 3
    assert "os.exec" not in prompts.effective()


def test_writes_go_through_a_symlinked_overlay(
    make_prompts: MakePrompts, overlay_path: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared_overlay.md"
    shared.write_text(OVERLAY)
    overlay_path.symlink_to(shared)
    prompts = make_prompts(overlay=None)
    prompts.append_overlay("shared rule")
    assert overlay_path.is_symlink()
    assert shared.read_text() == OVERLAY + "shared rule\n"
    assert not prompts.changed_on_disk()
