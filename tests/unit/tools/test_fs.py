"""The fs sandbox battery of SPEC §5.5 / §11: escapes refused, writes atomic, patches checked."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import hashlib
import os
import stat
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ateam.errors import Code, FsConflict, FsDenied
from ateam.tools.fs import Encoding, EntryType, Sandbox


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The agent's cwd, two levels down so ``../../etc/passwd`` lands inside tmp_path."""
    path = tmp_path / "home" / "cwd"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    return path


@pytest.fixture
def box(root: Path) -> Sandbox:
    return Sandbox(root)


def denied(box: Sandbox, path: str | Path) -> FsDenied:
    """Assert every operation refuses ``path`` with fs.denied; return read's error."""
    with pytest.raises(FsDenied) as caught:
        box.read(path)
    with pytest.raises(FsDenied):
        box.list(path)
    with pytest.raises(FsDenied):
        box.write(path, "pwned\n")
    with pytest.raises(FsDenied):
        box.propose_patch(path, "pwned\n", based_on_sha=sha(b""))
    error = caught.value
    assert error.code == Code.FS_DENIED
    assert "\n" not in error.one_line()
    return error


# --- escapes -----------------------------------------------------------------------------


def test_dotdot_escape_is_denied(box: Sandbox, tmp_path: Path) -> None:
    # Give the escape a real target, so only the sandbox can make the read fail.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0\n")
    error = denied(box, "../../etc/passwd")
    assert "../../etc/passwd" in error.message
    assert "outside the sandbox" in error.message
    assert (tmp_path / "etc" / "passwd").read_text() == "root:x:0:0\n"


def test_dotdot_to_the_real_etc_passwd_is_denied(box: Sandbox) -> None:
    denied(box, "../" * 40 + "etc/passwd")


def test_absolute_paths_outside_are_denied(box: Sandbox, outside: Path) -> None:
    denied(box, "/etc/passwd")
    denied(box, outside / "secret.txt")
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_symlink_to_etc_is_denied(box: Sandbox, root: Path) -> None:
    (root / "link").symlink_to("/etc")
    error = denied(box, "link/passwd")
    assert "/etc/passwd" in error.message
    denied(box, "link")


def test_symlinked_parent_directory_leading_out_is_denied(
    box: Sandbox, root: Path, outside: Path
) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "deeper").symlink_to(outside)
    denied(box, "sub/deeper/secret.txt")
    denied(box, "sub/deeper/new.txt")
    assert not (outside / "new.txt").exists()
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_symlinked_file_leading_out_is_denied(box: Sandbox, root: Path, outside: Path) -> None:
    (root / "innocent.txt").symlink_to(outside / "secret.txt")
    denied(box, "innocent.txt")
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_symlink_that_stays_inside_is_followed(box: Sandbox, root: Path) -> None:
    (root / "real.txt").write_text("inside\n")
    (root / "alias.txt").symlink_to("real.txt")
    assert box.read("alias.txt").content == "inside\n"
    box.write("alias.txt", "changed\n")
    assert (root / "real.txt").read_text() == "changed\n"
    assert (root / "alias.txt").is_symlink()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_device_files_are_denied_even_when_whitelisted(root: Path, device: str) -> None:
    assert os.path.exists(device)
    error = denied(Sandbox(root), device)
    assert "outside the sandbox" in error.message
    error = denied(Sandbox(root, whitelist=[Path("/dev")]), device)
    assert "character device" in error.message


def test_fifo_inside_the_sandbox_is_denied(box: Sandbox, root: Path) -> None:
    os.mkfifo(root / "pipe")
    error = denied(box, "pipe")  # would block for ever if opened
    assert "FIFO" in error.message


def test_nul_byte_in_a_path_is_denied(box: Sandbox, root: Path) -> None:
    (root / "ok.txt").write_text("fine\n")
    error = denied(box, "ok.txt\x00../../etc/passwd")
    assert "NUL" in error.message
    assert "\x00" not in error.one_line()  # repr() shows it escaped


# --- allowed paths -----------------------------------------------------------------------


def test_relative_path_inside_is_allowed(box: Sandbox, root: Path) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "ok.txt").write_text("hello\n")
    result = box.read("./sub/ok.txt")
    assert result.content == "hello\n"
    assert result.encoding is Encoding.TEXT
    assert result.sha256 == sha(b"hello\n")
    assert (result.size, result.truncated) == (6, False)
    assert box.read(root / "sub" / "ok.txt") == result  # the absolute spelling too


def test_whitelisted_outside_dir_is_allowed(root: Path, outside: Path) -> None:
    box = Sandbox(root, whitelist=[outside])
    assert box.read(outside / "secret.txt").content == "top secret\n"
    box.write(outside / "notes" / "new.txt", "ok\n")
    assert (outside / "notes" / "new.txt").read_text() == "ok\n"
    names = [entry.name for entry in box.list(outside).entries]
    assert names == ["notes", "secret.txt"]
    # Reached through a symlink in the cwd it is still allowed: the real path decides.
    (root / "shared").symlink_to(outside)
    assert box.read("shared/secret.txt").content == "top secret\n"
    denied(box, outside.parent / "elsewhere.txt")


def test_whitelisted_file_does_not_open_its_directory(root: Path, outside: Path) -> None:
    box = Sandbox(root, whitelist=[outside / "secret.txt"])
    assert box.read(outside / "secret.txt").content == "top secret\n"
    denied(box, outside / "other.txt")


def test_write_refuses_to_create_parents_outside(root: Path, outside: Path) -> None:
    box = Sandbox(root, whitelist=[outside / "absent" / "file.txt"])
    with pytest.raises(FsDenied, match="outside"):
        box.write(outside / "absent" / "file.txt", "x")
    assert not (outside / "absent").exists()


# --- read and list -----------------------------------------------------------------------


def test_binary_read_is_base64(box: Sandbox, root: Path) -> None:
    data = bytes(range(256))
    (root / "blob.bin").write_bytes(data)
    result = box.read("blob.bin")
    assert result.encoding is Encoding.BASE64
    assert base64.b64decode(result.content) == data
    assert (result.sha256, result.size) == (sha(data), 256)


def test_text_with_a_nul_is_treated_as_binary(box: Sandbox, root: Path) -> None:
    (root / "nul.txt").write_bytes(b"abc\x00def")
    assert box.read("nul.txt").encoding is Encoding.BASE64


def test_truncated_read_hashes_the_whole_file(box: Sandbox, root: Path) -> None:
    data = ("é" * 100).encode()  # two bytes per character
    (root / "long.txt").write_bytes(data)
    result = box.read("long.txt", max_bytes=11)
    # The eleventh byte starts a character; it is held back rather than turning to base64.
    assert (result.encoding, result.content) == (Encoding.TEXT, "é" * 5)
    assert (result.truncated, result.size, result.sha256) == (True, 200, sha(data))


def test_reading_a_directory_or_missing_file_is_an_os_error(box: Sandbox, root: Path) -> None:
    (root / "dir").mkdir()
    with pytest.raises(IsADirectoryError):
        box.read("dir")
    with pytest.raises(FileNotFoundError):
        box.read("missing.txt")


def test_list_reports_types_without_following_symlinks(box: Sandbox, root: Path) -> None:
    (root / "b.txt").write_text("12345")
    (root / "a_dir").mkdir()
    (root / "c_out").symlink_to("/etc")
    os.mkfifo(root / "d_pipe")
    listing = box.list()
    assert [(e.name, e.type) for e in listing.entries] == [
        ("a_dir", EntryType.DIR),
        ("b.txt", EntryType.FILE),
        ("c_out", EntryType.SYMLINK),
        ("d_pipe", EntryType.OTHER),
    ]
    assert listing.entries[1].size == 5
    assert (listing.total, listing.truncated) == (4, False)


def test_list_caps_entries_in_name_order(box: Sandbox, root: Path) -> None:
    for name in ("e", "c", "a", "d", "b"):
        (root / name).write_text(name)
    listing = box.list(".", max_entries=3)
    assert [e.name for e in listing.entries] == ["a", "b", "c"]
    assert (listing.total, listing.truncated) == (5, True)


# --- write -------------------------------------------------------------------------------


@pytest.fixture
def umask() -> Iterator[int]:
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def test_write_preserves_the_mode_of_an_existing_file(box: Sandbox, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    digest = box.write("run.sh", "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert script.read_text() == "#!/bin/sh\necho hi\n"
    assert digest == sha(b"#!/bin/sh\necho hi\n")


def test_new_file_follows_the_umask_and_parents_are_created(
    box: Sandbox, root: Path, umask: int
) -> None:
    box.write("pkg/sub/new.py", "x = 1\n")
    made = root / "pkg" / "sub" / "new.py"
    assert made.read_text() == "x = 1\n"
    assert stat.S_IMODE(made.stat().st_mode) == 0o666 & ~umask


def test_write_is_atomic(box: Sandbox, root: Path) -> None:
    target = root / "data.txt"
    target.write_text("old\n")
    before = target.stat().st_ino
    with target.open() as held:  # a reader that opened before the write
        box.write("data.txt", "new\n")
        assert held.read() == "old\n"
    assert target.stat().st_ino != before
    assert target.read_text() == "new\n"
    assert sorted(os.listdir(root)) == ["data.txt"]  # no temp file left behind


def test_a_reader_never_sees_a_partial_file(box: Sandbox, root: Path) -> None:
    versions = ["a" * (1 << 20), "b" * (1 << 20)]
    (root / "big.txt").write_text(versions[0])
    seen: set[int] = set()
    bad: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            text = (root / "big.txt").read_text()
            if text not in versions:
                bad.append(len(text))
            seen.add(len(text))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for round_ in range(40):
            box.write("big.txt", versions[round_ % 2])
    finally:
        stop.set()
        thread.join()
    assert bad == []
    assert seen == {1 << 20}


def test_write_over_a_directory_fails_and_leaves_no_temp(box: Sandbox, root: Path) -> None:
    (root / "dir").mkdir()
    with pytest.raises(IsADirectoryError):
        box.write("dir", "x")
    assert os.listdir(root) == ["dir"]


def test_whitelisted_file_inside_the_root_gets_its_parents(root: Path) -> None:
    box = Sandbox(root, whitelist=[root / "new" / "f.txt"])
    box.write("new/f.txt", "ok\n")
    assert (root / "new" / "f.txt").read_text() == "ok\n"


def test_temp_name_of_a_long_multibyte_name_fits(box: Sandbox, root: Path) -> None:
    name = "\N{GRINNING FACE}" * 63  # 252 bytes: a 64-character cut of it would not fit
    box.write(name, "x\n")
    assert box.read(name).content == "x\n"
    assert os.listdir(root) == [name]


# --- patch -------------------------------------------------------------------------------


BEFORE = "".join(f"line {n}\n" for n in range(1, 11))
AFTER = BEFORE.replace("line 5\n", "line five\n")


@pytest.fixture
def source(root: Path) -> Path:
    path = root / "src.txt"
    path.write_text(BEFORE)
    path.chmod(0o640)
    return path


def test_patch_proposal_is_a_unified_diff(box: Sandbox, source: Path) -> None:
    read = box.read("src.txt")
    proposal = box.propose_patch("src.txt", AFTER, based_on_sha=read.sha256)
    assert proposal.diff == (
        "--- a/src.txt\n+++ b/src.txt\n@@ -2,7 +2,7 @@\n"
        " line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
    )
    assert (proposal.path, proposal.base_sha) == ("src.txt", sha(BEFORE.encode()))
    assert proposal.new_sha == sha(AFTER.encode())
    assert source.read_text() == BEFORE  # proposing changes nothing


def test_patch_marks_a_missing_final_newline(box: Sandbox, root: Path) -> None:
    (root / "f.txt").write_text("a\nb")
    proposal = box.propose_patch("f.txt", "a\nc", based_on_sha=sha(b"a\nb"))
    assert proposal.diff.endswith(
        "-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
    )


def test_patch_applies_when_the_file_is_unchanged(box: Sandbox, source: Path) -> None:
    proposal = box.propose_patch("src.txt", AFTER, based_on_sha=box.read("src.txt").sha256)
    assert box.apply_patch(proposal) == proposal.new_sha
    assert source.read_text() == AFTER
    assert stat.S_IMODE(source.stat().st_mode) == 0o640
    assert not source.with_name("src.txt.bak").exists()


def test_patch_is_refused_when_the_file_changed(box: Sandbox, source: Path) -> None:
    proposal = box.propose_patch("src.txt", AFTER, based_on_sha=box.read("src.txt").sha256)
    source.write_text(BEFORE + "edited meanwhile\n")
    with pytest.raises(FsConflict) as caught:
        box.apply_patch(proposal, backup=True)
    assert caught.value.code == "fs.conflict"
    assert source.read_text() == BEFORE + "edited meanwhile\n"
    assert not source.with_name("src.txt.bak").exists()
    with pytest.raises(FsConflict):
        box.apply_edited(proposal, "whatever\n")
    assert source.read_text() == BEFORE + "edited meanwhile\n"


def test_proposal_against_a_stale_read_is_refused(box: Sandbox, source: Path) -> None:
    with pytest.raises(FsConflict):
        box.propose_patch("src.txt", AFTER, based_on_sha=sha(b"what it was long ago"))


def test_patch_keeps_a_backup_when_asked(box: Sandbox, source: Path) -> None:
    proposal = box.propose_patch("src.txt", AFTER, based_on_sha=sha(BEFORE.encode()))
    box.apply_patch(proposal, backup=True)
    backup = source.with_name("src.txt.bak")
    assert (source.read_text(), backup.read_text()) == (AFTER, BEFORE)
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640


def test_edited_patch_writes_the_owners_version(box: Sandbox, source: Path) -> None:
    proposal = box.propose_patch("src.txt", AFTER, based_on_sha=sha(BEFORE.encode()))
    edited = AFTER.replace("line five", "line 5 (edited)")
    assert box.apply_edited(proposal, edited) == sha(edited.encode())
    assert source.read_text() == edited


def test_patch_of_a_binary_file_is_refused(box: Sandbox, root: Path) -> None:
    (root / "blob.bin").write_bytes(b"\xff\xfe")
    with pytest.raises(FsDenied, match="UTF-8"):
        box.propose_patch("blob.bin", "text", based_on_sha=sha(b"\xff\xfe"))


# --- names too long ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "n" * 256,  # one component over NAME_MAX
        "sub/" + "n" * 300,
        "d/" * 2100 + "f",  # every component short, the whole over PATH_MAX
        "{root}/" + "n" * 300,
    ],
    ids=["name", "nested-name", "path", "absolute"],
)
def test_names_too_long_are_denied(box: Sandbox, root: Path, path: str) -> None:
    error = denied(box, path.format(root=root))
    assert "name too long" in error.message
    assert os.listdir(root) == []  # write created no parent on its way to failing


# --- a tree that changes under the sandbox -----------------------------------------------
#
# root/p is a real directory and root/q a symlink to a directory outside; both hold a file
# called ``file``. Exchanging them makes ``p/file`` lead in or out in turn, as the chaos run
# of issue 9 did. Whatever the timing, the sandbox may answer with the inside file or refuse
# (or not find it mid-swap), but never hand over or change what lies outside.

INSIDE = "inside\n"
SECRET = "outside secret\n"
_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


@dataclass
class Tree:
    """The swapped pair and the directory outside the sandbox that ``q`` leads to."""

    p: Path
    q: Path
    elsewhere: Path

    def snapshot(self) -> list[tuple[str, str, int]]:
        """Names, contents and inode numbers outside: a write must change none of them."""
        return [
            (item.name, item.read_text(), item.stat().st_ino)
            for item in sorted(self.elsewhere.iterdir())
        ]


@pytest.fixture
def tree(root: Path, tmp_path: Path) -> Tree:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "file").write_text(SECRET)
    (elsewhere / "only-outside.txt").write_text("")
    (root / "p").mkdir()
    (root / "p" / "file").write_text(INSIDE)
    (root / "p" / "only-inside.txt").write_text("")
    (root / "q").symlink_to(elsewhere)
    return Tree(root / "p", root / "q", elsewhere)


def swap_by_rename(tree: Tree) -> None:
    """Exchange p and q with three renames, for a single-threaded swap."""
    parked = tree.p.with_name("parked")
    os.rename(tree.p, parked)
    os.rename(tree.q, tree.p)
    os.rename(parked, tree.q)


def _renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    # (olddirfd, oldpath, newdirfd, newpath, flags)
    function.argtypes = (ctypes.c_int, ctypes.c_char_p) * 2 + (ctypes.c_uint,)
    return function


@contextlib.contextmanager
def swapping(tree: Tree) -> Iterator[None]:
    """Exchange p and q atomically, as fast as a thread can, for the block's duration.

    ``renameat2(RENAME_EXCHANGE)`` leaves no moment without a ``p``, so a write never finds
    it missing and makes a directory of its own there. ctypes drops the GIL for the call,
    so the swaps run alongside the sandbox's system calls.
    """
    exchange = _renameat2()
    p, q = os.fsencode(tree.p), os.fsencode(tree.q)
    # One exchange to see the kernel and filesystem support it, one to undo it.
    # Linux >= 3.15 with glibc >= 2.28, as on every machine ateam is tested on: a race
    # test that cannot race must fail, not pass by skipping.
    if exchange is None or exchange(_AT_FDCWD, p, _AT_FDCWD, q, _RENAME_EXCHANGE) != 0:
        pytest.fail("renameat2(RENAME_EXCHANGE) is unavailable: the swap race cannot run")
    exchange(_AT_FDCWD, p, _AT_FDCWD, q, _RENAME_EXCHANGE)
    stop = threading.Event()
    failures: list[int] = []
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            if exchange(_AT_FDCWD, p, _AT_FDCWD, q, _RENAME_EXCHANGE) != 0:
                failures.append(ctypes.get_errno())
                return
            swaps += 1

    thread = threading.Thread(target=swapper, name="swapper")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert failures == []
    assert swaps > 1000


REFUSALS = {"denied: changed", "denied: outside", "not found"}


def race(operation: Callable[[], str], rounds: int) -> Counter[str]:
    """Run ``operation`` ``rounds`` times; count its answers and how it was refused."""
    outcomes: Counter[str] = Counter()
    for _ in range(rounds):
        try:
            outcomes[operation()] += 1
        except FsDenied as exc:
            changed = "changed while it was opened" in exc.message
            outcomes["denied: changed" if changed else "denied: outside"] += 1
        except FileNotFoundError:
            outcomes["not found"] += 1
        except OSError as exc:  # counted, so a failure shows the escapes as well
            outcomes[f"raw {errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
    return outcomes


def refused(outcomes: Counter[str]) -> int:
    return sum(outcomes[refusal] for refusal in REFUSALS)


def test_read_never_returns_the_outside_file_while_a_parent_is_swapped(
    box: Sandbox, tree: Tree
) -> None:
    with swapping(tree):
        outcomes = race(lambda: box.read("p/file").content, 20_000)
    assert outcomes[SECRET] == 0, outcomes
    assert set(outcomes) <= {INSIDE, *REFUSALS}, outcomes
    assert outcomes[INSIDE] > 0, outcomes
    assert refused(outcomes) > 0, outcomes  # the race did happen


def test_list_never_shows_the_outside_directory_while_it_is_swapped(
    box: Sandbox, tree: Tree
) -> None:
    def names() -> str:
        return " ".join(entry.name for entry in box.list("p").entries)

    with swapping(tree):
        outcomes = race(names, 20_000)
    assert outcomes["file only-outside.txt"] == 0, outcomes
    assert set(outcomes) <= {"file only-inside.txt", *REFUSALS}, outcomes
    assert outcomes["file only-inside.txt"] > 0, outcomes
    assert refused(outcomes) > 0, outcomes


def test_write_never_changes_the_outside_while_a_parent_is_swapped(
    box: Sandbox, tree: Tree
) -> None:
    before = tree.snapshot()
    with swapping(tree):
        outcomes = race(lambda: box.write("p/file", INSIDE) and "written", 5_000)
    assert tree.snapshot() == before, outcomes
    assert set(outcomes) <= {"written", *REFUSALS}, outcomes
    assert outcomes["written"] > 0, outcomes
    assert refused(outcomes) > 0, outcomes
    inside = tree.q if tree.p.is_symlink() else tree.p
    assert sorted(os.listdir(inside)) == ["file", "only-inside.txt"]  # no temp left behind


class SwapAfterCheck(Sandbox):
    """A sandbox whose tree is swapped between the check and the open, every time."""

    def __init__(self, root: Path, tree: Tree) -> None:
        super().__init__(root)
        self.tree = tree

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        real = super().resolve(path)
        swap_by_rename(self.tree)
        return real


def test_a_parent_swapped_after_the_check_is_refused(root: Path, tree: Tree) -> None:
    box = SwapAfterCheck(root, tree)
    proposal = Sandbox(root).propose_patch("p/file", "pwned\n", based_on_sha=sha(INSIDE.encode()))
    before = tree.snapshot()
    attempts: list[Callable[[], object]] = [
        lambda: box.read("p/file"),
        lambda: box.list("p"),
        lambda: box.write("p/file", "pwned\n"),
        lambda: box.write("p/new/file", "pwned\n"),
        lambda: box.propose_patch("p/file", "pwned\n", based_on_sha=sha(SECRET.encode())),
        lambda: box.apply_patch(proposal, backup=True),
        lambda: box.apply_edited(proposal, "pwned\n"),
    ]
    for attempt in attempts:
        with pytest.raises(FsDenied, match="changed while it was opened") as caught:
            attempt()
        assert "'p'" in caught.value.message
        assert "\n" not in caught.value.one_line()
        swap_by_rename(tree)  # p is the real directory again
    assert tree.snapshot() == before
    assert sorted(os.listdir(tree.p)) == ["file", "only-inside.txt"]
    assert (tree.p / "file").read_text() == INSIDE


def test_a_final_component_swapped_after_the_check_is_refused(
    root: Path, tree: Tree, outside: Path
) -> None:
    class Swap(Sandbox):
        def resolve(self, path: str | os.PathLike[str]) -> Path:
            real = super().resolve(path)
            (root / "p" / "file").unlink(missing_ok=True)
            (root / "p" / "file").symlink_to(outside / "secret.txt")
            return real

    with pytest.raises(FsDenied, match="changed while it was opened"):
        Swap(root).read("p/file")
    (root / "p" / "file").unlink()
    (root / "p" / "file").write_text(INSIDE)
    with pytest.raises(FsDenied, match="changed while it was opened"):
        Swap(root).write("p/file", "pwned\n")
    assert (outside / "secret.txt").read_text() == "top secret\n"
