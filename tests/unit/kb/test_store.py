"""The knowledge base (SPEC §10): chunking, embeddings, and a real Chroma store on disk."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ateam.agent.native.tools import default_registry
from ateam.agent.state.knowledge import AgentKb
from ateam.config import load_project
from ateam.config.schema import EmbeddingsProvider, EmbeddingsSpec
from ateam.errors import (
    AuthFailed,
    BadRequest,
    Code,
    ConfigError,
    KbDenied,
    KbUnavailable,
    RateLimited,
    ToolDenied,
)
from ateam.kb import (
    MAX_PATHS,
    HashingEmbedder,
    KnowledgeBase,
    OpenAIEmbedder,
    chunk,
    content_hash,
    embedder_from_config,
    normalise,
    scope_dir,
    split_document,
)
from ateam.kb.chunking import CHARS_PER_TOKEN, Section
from ateam.paths import ateam_home
from ateam.tools import ToolContext
from tests.servers.openai_wire import OpenAIWireServer

# --- a small corpus of distinct subjects ------------------------------------------------

CORPUS = {
    "docs/redis.md": """\
        # Connecting to Redis

        ateam talks to its agents over Redis. Give the URL with `--redis` or the
        `ATEAM_REDIS_URL` environment variable.

        ## Authentication and TLS

        Use a `rediss://` URL to connect over TLS. A password is sent with AUTH; with
        ACLs, put the user name in the URL as well.

        ## Reconnection

        When the connection drops, the client reconnects with a growing delay and resumes
        the event stream from the last offset it saw, so no event is lost.
        """,
    "docs/install.md": """\
        # Installing ateam

        Install the package with pip. The optional extras add features:

            pip install 'ateam[kb]'         # the knowledge base, with chromadb
            pip install 'ateam[providers]'  # the OpenAI and Anthropic SDKs

        Python 3.11 or newer is required.
        """,
    "src/retry.go": """\
        package retry

        import "time"

        // Backoff returns the delay before the next attempt: exponential growth, capped.
        func Backoff(attempt int, base, limit time.Duration) time.Duration {
        \tdelay := base << attempt
        \tif delay > limit || delay <= 0 {
        \t\treturn limit
        \t}
        \treturn delay
        }

        // Do calls fn until it succeeds or the attempts run out, sleeping between tries.
        func Do(attempts int, fn func() error) error {
        \tvar err error
        \tfor attempt := 0; attempt < attempts; attempt++ {
        \t\tif err = fn(); err == nil {
        \t\t\treturn nil
        \t\t}
        \t\ttime.Sleep(Backoff(attempt, 100*time.Millisecond, 5*time.Second))
        \t}
        \treturn err
        }
        """,
    "src/tokens.py": '''\
        """Counting tokens for the context window."""


        def estimate_tokens(text: str) -> int:
            """Four characters make one token, roughly."""
            return (len(text) + 3) // 4


        class ContextBudget:
            """How many tokens of the model's context window are left for history."""

            def __init__(self, window: int, reserve: int) -> None:
                self.window = window
                self.reserve = reserve

            def remaining(self, used: int) -> int:
                return max(0, self.window - self.reserve - used)
        ''',
    "notes/bread.txt": """\
        Sourdough bread

        Mix 500 g flour, 350 g water and 100 g starter. Rest the dough for an hour, add
        10 g salt, then fold it every half hour for three hours. Shape the loaf, proof it
        overnight in the fridge, and bake in a hot oven at 250 degrees for 40 minutes.
        """,
}


def write_corpus(root: Path) -> dict[str, Path]:
    paths = {}
    for relative, text in CORPUS.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        paths[relative] = path
    return paths


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def make_kb(tmp_path: Path) -> Iterator[Callable[..., KnowledgeBase]]:
    """Opens stores under tmp_path and closes them all when the test ends."""
    opened: list[KnowledgeBase] = []

    def make(name: str = "kb", **kwargs: Any) -> KnowledgeBase:
        kwargs.setdefault("scope", "agent")
        kwargs.setdefault("project", "demo")
        kb = KnowledgeBase(tmp_path / name, **kwargs)
        opened.append(kb)
        return kb

    yield make
    for kb in opened:
        kb.close()


# --- normalising and hashing ------------------------------------------------------------


def test_normalise_ignores_line_endings_trailing_spaces_and_blank_runs() -> None:
    plain = "# Title\n\nfirst line\n    indented\n\nlast\n"
    variants = [
        plain.replace("\n", "\r\n"),
        plain.replace("\n", "\r"),
        "# Title  \n\nfirst line\t\n    indented   \n\n\n\n\nlast",
        "\n\n" + plain + "\n\n\n",
    ]
    assert normalise(plain) == "# Title\n\nfirst line\n    indented\n\nlast"
    assert {content_hash(v) for v in variants} == {content_hash(plain)}
    assert len(content_hash(plain)) == 64
    # Indentation is content (Python, YAML); so is any other change.
    assert content_hash(plain.replace("    indented", "indented")) != content_hash(plain)


# --- splitting --------------------------------------------------------------------------


def test_markdown_splits_at_headings_with_their_parents() -> None:
    text = textwrap.dedent(
        """\
        intro

        # Install
        text
        ## Linux
        apt
        ```sh
        # a comment in a fence, not a heading
        ```
        Usage
        =====
        body
        """
    )
    sections = split_document("guide.md", text)
    assert [(s.title, s.first_line, s.last_line) for s in sections] == [
        ("", 1, 2),
        ("Install", 3, 4),
        ("Install / Linux", 5, 9),
        ("Usage", 10, 12),
    ]


def test_python_splits_at_top_level_definitions_with_their_decorators() -> None:
    text = textwrap.dedent(
        """\
        import os

        # the cache
        @functools.cache
        def load():
            def inner():
                pass

        class Store:
            def get(self):
                pass

        async def serve():
            pass
        """
    )
    sections = split_document(Path("src/store.py"), text)
    assert [(s.title, s.first_line) for s in sections] == [
        ("", 1),
        ("load", 3),
        ("Store", 9),
        ("serve", 13),
    ]
    assert sum(len(s.lines) for s in sections) == len(text.splitlines())


@pytest.mark.parametrize(
    ("name", "text", "titles"),
    [
        ("a.go", "package a\n\nfunc (s *S) Run() {\n}\n\ntype T struct{}\n", ["", "Run", "T"]),
        ("a.rs", "use x;\n\n#[derive(Debug)]\npub struct P;\nimpl P {\n}\n", ["", "P", "P"]),
        ("a.ts", "import x;\nexport async function f() {}\nclass C {}\n", ["", "f", "C"]),
        ("notes.txt", "just\nsome\ntext\n", [""]),
    ],
)
def test_other_languages_split_by_the_table(name: str, text: str, titles: list[str]) -> None:
    assert [s.title for s in split_document(name, text)] == titles


def test_chunks_stay_within_the_target_and_overlap() -> None:
    lines = tuple(f"line {n:04d} " + "lorem " * 12 for n in range(400))
    big = Section("Big", lines, 1)
    small = [Section(f"s{n}", (f"def s{n}(): pass",), 401 + n) for n in range(3)]
    chunks = chunk([big, *small], target_tokens=600, overlap_tokens=80)

    assert all(len(c.text) <= 600 * CHARS_PER_TOKEN for c in chunks)
    pieces, packed = chunks[:-1], chunks[-1]
    assert len(pieces) > 5 and all(c.title == "Big" for c in pieces)
    for before, after in itertools.pairwise(pieces):
        # ~80 tokens of the end of one piece start the next, and the line ranges say so.
        shared = before.text[-80 * CHARS_PER_TOKEN :].split("\n", 1)[1]
        assert after.text.startswith(shared)
        assert after.first_line <= before.last_line
    assert (pieces[0].first_line, pieces[-1].last_line) == (1, 400)
    # Small neighbouring sections share one chunk.
    assert (packed.title, packed.lines) == ("s0, s1, s2", "401-403")


def test_a_single_huge_line_is_cut_too() -> None:
    chunks = chunk(split_document("app.min.js", "x" * 10_000), target_tokens=100, overlap_tokens=10)
    assert len(chunks) > 1
    assert all(len(c.text) <= 100 * CHARS_PER_TOKEN for c in chunks)


# --- ingesting --------------------------------------------------------------------------


def test_ingest_a_directory_with_default_globs_and_progress(
    project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    write_corpus(project)
    (project / ".hidden").mkdir()
    (project / ".hidden" / "secret.md").write_text("# hidden\n")
    (project / ".env").write_text("TOKEN=x\n")
    (project / "node_modules" / "lib").mkdir(parents=True)
    (project / "node_modules" / "lib" / "index.js").write_text("function f() {}\n")
    (project / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (project / "blob.txt").write_bytes(b"text\x00with a NUL byte")
    (project / "huge.txt").write_text("word " * 250_000)
    (project / ".ateam" / "agents" / "bob" / "state").mkdir(parents=True)
    (project / ".ateam" / "agents" / "bob" / "state" / "history.json").write_text("{}")
    (project / ".ateam" / "agents" / "bob" / "prompt.md").write_text("# Bob\nreviews code\n")

    calls: list[tuple[int, int, str]] = []
    kb = make_kb()
    report = kb.ingest(
        [project, project / ".ateam" / "agents"],
        allowed_roots=[project],
        source_agent="alice",
        progress=lambda done, total, path: calls.append((done, total, path)),
    )

    ingested = sorted(
        Path(item["path"]).relative_to(project).as_posix() for item in report.ingested
    )
    assert ingested == sorted([*CORPUS, ".ateam/agents/bob/prompt.md"])
    reasons = {Path(s["path"]).name: s["reason"] for s in report.skipped}
    assert reasons == {"blob.txt": "binary", "huge.txt": "larger than 1 MiB"}
    assert [done for done, _, _ in calls] == list(range(1, 9))
    assert {total for _, total, _ in calls} == {8}
    assert report.chunks == kb.count() == sum(item["chunks"] for item in report.ingested)

    docs = {Path(d["path"]).name: d for d in kb.documents()}
    assert docs["redis.md"]["source_agent"] == "alice"
    assert docs["redis.md"]["scope"] == "agent"
    assert (
        docs["redis.md"]["doc_id"]
        == "d-" + content_hash(textwrap.dedent(CORPUS["docs/redis.md"]))[:12]
    )
    assert report.to_wire()["chunks"] == report.chunks


def test_duplicates_are_skipped_never_stored_twice(
    project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    paths = write_corpus(project)
    original = paths["docs/redis.md"]
    # The same text with CRLF line endings and trailing spaces is the same document.
    copy = project / "copy-of-redis.md"
    copy.write_bytes(original.read_text().replace("\n", "  \r\n").encode())

    kb = make_kb()
    first = kb.ingest([original, copy], allowed_roots=[project])
    assert [item["path"] for item in first.ingested] == [str(original)]
    assert first.skipped == [
        {"path": str(copy), "reason": "duplicate", "duplicate_of": str(original)}
    ]
    stored = kb.count()
    assert stored == first.chunks

    again = kb.ingest(["docs/redis.md"], allowed_roots=[project])
    assert again.ingested == [] and again.chunks == 0
    assert again.skipped[0]["duplicate_of"] == str(original)
    assert kb.count() == stored
    assert len(kb.documents()) == 1


def test_a_changed_file_replaces_its_earlier_version(
    project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    notes = project / "notes.md"
    notes.write_text("# Notes\nthe build uses make\n")
    kb = make_kb()
    first = kb.ingest([notes], allowed_roots=[project])

    notes.write_text("# Notes\nthe build uses ninja now\n")
    second = kb.ingest([notes], allowed_roots=[project])

    assert second.ingested[0]["replaced"] == first.ingested[0]["doc_id"]
    assert [d["doc_id"] for d in kb.documents()] == [second.ingested[0]["doc_id"]]
    assert kb.count() == second.chunks
    assert "ninja" in kb.search("which build tool: ninja or make")[0].text


@pytest.mark.parametrize(
    "escape",
    ["outside", "dotdot", "symlink", "symlinked_dir", "device"],
)
def test_paths_outside_the_sandbox_are_refused_and_nothing_is_stored(
    escape: str, tmp_path: Path, project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    paths = write_corpus(project)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.md").write_text("# secret\n")
    (project / "link.md").symlink_to(outside / "secret.md")
    (project / "linked").symlink_to(outside)
    bad = {
        "outside": outside / "secret.md",
        "dotdot": Path("../elsewhere/secret.md"),
        "symlink": project / "link.md",
        "symlinked_dir": project / "linked",
        "device": Path("/dev/zero"),
    }[escape]

    kb = make_kb()
    with pytest.raises(KbDenied) as caught:
        kb.ingest([paths["docs/install.md"], bad], allowed_roots=[project])

    assert caught.value.code == Code.KB_INGEST_DENIED == "kb.ingest.denied"
    assert os.fspath(bad) in caught.value.message
    assert kb.count() == 0


def test_a_link_out_found_inside_a_directory_is_skipped_not_followed(
    tmp_path: Path, project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    write_corpus(project)
    outside = tmp_path / "elsewhere.md"
    outside.write_text("# not yours\n")
    (project / "docs" / "link.md").symlink_to(outside)

    report = make_kb().ingest([project / "docs"], allowed_roots=[project])

    assert len(report.ingested) == 2
    assert report.skipped[0]["path"] == str(project / "docs" / "link.md")
    assert report.skipped[0]["reason"].startswith("outside the sandbox")


def test_at_most_512_paths_per_call(project: Path, make_kb: Callable[..., KnowledgeBase]) -> None:
    many = project / "many"
    many.mkdir()
    for n in range(MAX_PATHS + 1):
        (many / f"note{n}.txt").write_text(f"note number {n}\n")

    kb = make_kb()
    with pytest.raises(BadRequest, match="at most 512 paths per call"):
        kb.ingest([many], allowed_roots=[project])
    assert kb.count() == 0


# --- searching --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("reconnect to redis over TLS", "docs/redis.md"),
        ("exponential backoff between retries", "src/retry.go"),
        ("how many tokens are left in the context window", "src/tokens.py"),
        ("pip install the knowledge base extra", "docs/install.md"),
        ("bake a loaf of sourdough", "notes/bread.txt"),
    ],
)
def test_search_finds_the_relevant_document_first(
    query: str, expected: str, project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    paths = write_corpus(project)
    kb = make_kb()
    kb.ingest([project], allowed_roots=[project])

    hits = kb.search(query)

    assert hits, query
    assert hits[0].path == str(paths[expected])
    assert hits[0].score >= 0.35
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert hits[0].chunk_id.startswith(hits[0].doc_id + ":")
    assert hits[0].lines.startswith("1-")


@pytest.mark.parametrize(
    "query", ["zebra quantum accordion", "purple elephants juggling violins", "qwxz vbnm plok"]
)
def test_search_returns_nothing_for_an_unrelated_query(
    query: str, project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    write_corpus(project)
    kb = make_kb()
    kb.ingest([project], allowed_roots=[project])

    assert kb.search(query) == []
    # They are merely below the threshold: lowering it shows the best of the rest.
    assert all(hit.score < 0.35 for hit in kb.search(query, min_score=-1.0))


def test_search_of_an_empty_store_or_query(make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb()
    assert kb.search("anything") == []
    assert kb.search("   ") == []
    with pytest.raises(BadRequest):
        kb.search("x", k=0)


# --- copying between stores -------------------------------------------------------------


def test_export_and_import_copy_only_the_chosen_documents_with_provenance(
    project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    paths = write_corpus(project)
    source = make_kb("alice-kb")
    source.ingest([project], allowed_roots=[project], source_agent="alice")
    by_path = {d["path"]: d for d in source.documents()}
    chosen = [by_path[str(paths["docs/redis.md"])], by_path[str(paths["src/retry.go"])]]

    exported = source.export([d["doc_id"] for d in chosen])
    target = make_kb("bob-kb", scope="project")
    report = target.import_documents(exported, copied_from="alice")

    assert [item["doc_id"] for item in report.ingested] == [d["doc_id"] for d in chosen]
    copied = target.documents()
    assert {d["doc_id"] for d in copied} == {d["doc_id"] for d in chosen}
    for doc in copied:
        original = next(d for d in chosen if d["doc_id"] == doc["doc_id"])
        assert doc["hash"] == original["hash"]
        assert doc["path"] == original["path"]
        assert doc["chunks"] == original["chunks"]
        assert doc["source_agent"] == "alice"
        assert doc["copied_from"] == "alice"
        assert doc["scope"] == "project"
    assert target.count() == sum(d["chunks"] for d in chosen)
    assert target.search("reconnect to redis over TLS")[0].path == str(paths["docs/redis.md"])
    assert target.search("sourdough loaf") == []

    # Copying again skips what is already there.
    again = target.import_documents(exported, copied_from="alice")
    assert again.ingested == []
    assert [s["reason"] for s in again.skipped] == ["duplicate", "duplicate"]


def test_export_refuses_copy_all_and_unknown_ids(
    project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    write_corpus(project)
    kb = make_kb()
    kb.ingest([project], allowed_roots=[project])
    known = kb.documents()[0]["doc_id"]

    with pytest.raises(BadRequest, match="there is no copy-all"):
        kb.export([])
    with pytest.raises(BadRequest) as caught:
        kb.export([known, "d-000000000000"])
    assert caught.value.detail == {"unknown": ["d-000000000000"]}
    with pytest.raises(BadRequest, match="chunk 0"):
        kb.import_documents([{"text": "x", "metadata": {"hash": "nope"}}], copied_from="a")


# --- stores, scopes and embedders -------------------------------------------------------


def test_a_store_refuses_a_different_embedder(make_kb: Callable[..., KnowledgeBase]) -> None:
    make_kb("kb", embedder=HashingEmbedder(64)).close()
    with pytest.raises(KbUnavailable) as caught:
        make_kb("kb", embedder=HashingEmbedder(128))
    assert caught.value.code == "kb.unavailable"
    assert caught.value.detail["built_with"] == "hashing-v1-64"


def test_without_chromadb_the_kb_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "chromadb", None)  # makes `import chromadb` fail
    with pytest.raises(KbUnavailable, match=r"pip install 'ateam\[kb\]'"):
        KnowledgeBase(tmp_path / "kb", scope="agent", project="demo")


def test_scope_dirs(tmp_path: Path) -> None:
    agent_dir = tmp_path / "proj" / ".ateam" / "agents" / "bob"
    where = {"agent_dir": agent_dir, "project_root": tmp_path / "proj", "home": tmp_path / "h"}
    assert scope_dir("agent", **where) == agent_dir / "kb"
    assert scope_dir("project", **where) == tmp_path / "proj" / ".ateam" / "kb"
    assert scope_dir("user", **where) == tmp_path / "h" / "kb"
    with pytest.raises(BadRequest, match="unknown kb scope"):
        scope_dir("team", **where)
    with pytest.raises(BadRequest, match="project scope needs a project"):
        scope_dir("project", **{**where, "project_root": None})


_EMBED_IN_CHILD = """
import json, sys
from ateam.kb import HashingEmbedder
print(json.dumps(HashingEmbedder().embed(sys.argv[1:])))
"""


def test_hashing_embedder_is_the_same_in_every_process() -> None:
    texts = ["def retry_after(response): ...", "Sourdough bread with 500 g flour", ""]
    mine = HashingEmbedder().embed(texts)
    children = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _EMBED_IN_CHILD, *texts],
                env={**os.environ, "PYTHONHASHSEED": seed},
                capture_output=True,
                check=True,
                text=True,
                timeout=60,
            ).stdout
        )
        for seed in ("1", "2")
    ]
    assert children[0] == children[1] == mine
    assert all(len(vector) == 2048 for vector in mine)
    assert abs(sum(x * x for x in mine[0]) - 1.0) < 1e-9


# --- the configured embedder ------------------------------------------------------------


@pytest.fixture
def wire() -> Iterator[OpenAIWireServer]:
    """An OpenAI-compatible endpoint whose ``/embeddings`` the tests program."""
    with OpenAIWireServer() as server:
        yield server


def write_configured_project(root: Path, embeddings: str = "") -> Path:
    """``demo`` with agent ``zeus`` and ``embeddings`` as the tail of models.yaml."""
    (root / ".ateam" / "agents" / "zeus").mkdir(parents=True)
    (root / ".ateam" / "project.yaml").write_text("name: demo\n")
    (root / ".ateam" / "models.yaml").write_text(f"default: echo\n{embeddings}")
    (root / ".ateam" / "agents" / "zeus" / "agent.yaml").write_text("model: echo\n")
    return root


def openai_embeddings(base_url: str, model: str = "embed-small") -> str:
    return textwrap.dedent(f"""\
        embeddings:
          provider: openai
          base_url: {base_url}
          model: {model}
          api_key_env: KB_TEST_KEY
        """)


def agent_kb(root: Path, subdir: str = ".") -> AgentKb:
    """The agent's KB exactly as the agent process builds it: no embedder handed in."""
    project = load_project(root / subdir)
    zeus = project.agent("zeus")
    return AgentKb(
        agent_id=zeus.id,
        agent_dir=zeus.dir,
        project_root=project.root,
        home=ateam_home(),
        allowed_roots=[zeus.cwd],
    )


async def test_the_agent_kb_embeds_with_the_endpoint_models_yaml_configures(
    wire: OpenAIWireServer, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_TEST_KEY", "sk-kb-test")
    write_configured_project(project, openai_embeddings(wire.base_url))
    paths = write_corpus(project)
    # Vectors no lexical embedder would produce: the bread note and the made-up word
    # "qzxv" point one way, everything else the other. Only if the agent stores and
    # searches with the endpoint's vectors does "qzxv" find the bread note.
    wire.embed = lambda text: [1.0, 0.0] if "Sourdough" in text or text == "qzxv" else [0.0, 1.0]
    (project / "deep" / "er").mkdir(parents=True)
    kb = agent_kb(project, "deep/er")  # the configuration is found from below, too
    try:
        report = await kb.ingest("agent", ["docs", "notes"])
        hits = await kb.search("agent", "qzxv")
        embedder = await kb.embedder()
    finally:
        kb.close()

    assert len(report["ingested"]) == 3
    assert embedder.name == "openai:embed-small" and embedder.dim == 2
    assert [(h["path"], h["score"]) for h in hits] == [(str(paths["notes/bread.txt"]), 1.0)]
    requests = wire.embedding_requests
    assert requests and {r.path for r in requests} == {"/v1/embeddings"}
    sent = [text for r in requests for text in r.body["input"]]
    assert sent[-1] == "qzxv"
    assert any("Sourdough bread" in text for text in sent)
    assert {r.headers["authorization"] for r in requests} == {"Bearer sk-kb-test"}
    assert {r.body["model"] for r in requests} == {"embed-small"}


async def test_without_embeddings_configured_the_agent_kb_stays_offline(
    wire: OpenAIWireServer, project: Path
) -> None:
    write_configured_project(project)
    write_corpus(project)
    kb = agent_kb(project)
    try:
        await kb.ingest("agent", ["docs"])
        embedder = await kb.embedder()
    finally:
        kb.close()
    assert isinstance(embedder, HashingEmbedder) and embedder.name == "hashing-v1-2048"
    assert wire.requests == []


async def test_a_configured_hashing_dimension_is_used(project: Path) -> None:
    write_configured_project(project, "embeddings:\n  provider: hashing\n  dim: 64\n")
    kb = agent_kb(project)
    try:
        await kb.store("agent")
        assert (await kb.embedder()).name == "hashing-v1-64"
    finally:
        kb.close()
    # The store remembers it: another embedder is refused rather than mixing vectors.
    with pytest.raises(KbUnavailable):
        KnowledgeBase(project / ".ateam" / "agents" / "zeus" / "kb", scope="agent", project="demo")


async def test_a_store_built_by_another_embedder_is_refused_through_the_agent(
    wire: OpenAIWireServer, project: Path
) -> None:
    write_configured_project(project)
    kb = agent_kb(project)
    await kb.store("agent")  # built offline
    kb.close()
    (project / ".ateam" / "models.yaml").write_text(openai_embeddings(wire.base_url))

    kb = agent_kb(project)
    with pytest.raises(KbUnavailable) as caught:
        await kb.store("agent")
    assert caught.value.detail == {
        "built_with": "hashing-v1-2048",
        "configured": "openai:embed-small",
    }


@pytest.mark.parametrize(
    ("embeddings", "field", "message"),
    [
        ("embeddings:\n  provider: magic\n", "embeddings.provider", "'hashing' or 'openai'"),
        ("embeddings:\n  provider: openai\n", "embeddings", "needs `model:`"),
        ("embeddings:\n  provider: hashing\n  dim: 4\n", "embeddings.dim", "16"),
        ("embeddings:\n  api_key_env: not a name\n", "embeddings.api_key_env", "not a valid"),
        ("embeddings:\n  modle: x\n", "embeddings.modle", "unknown field"),
    ],
)
def test_a_bad_embeddings_section_fails_at_load_naming_the_field(
    project: Path, embeddings: str, field: str, message: str
) -> None:
    write_configured_project(project, embeddings)
    with pytest.raises(ConfigError) as caught:
        load_project(project)
    assert caught.value.field == field
    assert caught.value.file == str(project / ".ateam" / "models.yaml")
    assert message in caught.value.message


def test_embedder_from_config_maps_each_provider() -> None:
    assert embedder_from_config(None).name == "hashing-v1-2048"
    spec = EmbeddingsSpec(
        provider=EmbeddingsProvider.OPENAI,
        base_url="http://x/v1",
        model="m",
        api_key_env="K",
        dimensions=256,
    )
    remote = embedder_from_config(spec)
    assert isinstance(remote, OpenAIEmbedder)
    assert (remote.base_url, remote.model, remote.api_key_env) == ("http://x/v1", "m", "K")
    assert (remote.name, remote.dim) == ("openai:m@256", 256)
    # Every provider the schema accepts has a factory.
    names = {
        embedder_from_config(EmbeddingsSpec(provider=p, model="m")).name for p in EmbeddingsProvider
    }
    assert names == {"hashing-v1-2048", "openai:m"}


# --- OpenAI-compatible embeddings through the real SDK ----------------------------------


def test_openai_embedder_through_the_sdk(
    wire: OpenAIWireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_TEST_KEY", "sk-test")
    wire.embed = lambda text: [float(len(text)), 1.0, 0.0]
    embedder = OpenAIEmbedder(wire.base_url, "embed-small", "KB_TEST_KEY")
    embedder.batch_size = 2
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]

    vectors = embedder.embed(texts)

    # The server lists each batch in reverse: the vectors come back in input order.
    assert vectors == [[float(len(t)), 1.0, 0.0] for t in texts]
    assert embedder.dim == 3
    requests = wire.requests
    assert [r.path for r in requests] == ["/v1/embeddings"] * 3
    assert [r.body["input"] for r in requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert {r.body["model"] for r in requests} == {"embed-small"}
    assert {r.body["encoding_format"] for r in requests} == {"float"}
    assert requests[0].headers["authorization"] == "Bearer sk-test"


def test_openai_embedder_errors_are_typed(wire: OpenAIWireServer) -> None:
    with pytest.raises(AuthFailed):
        OpenAIEmbedder(wire.base_url, "m", "KB_TEST_UNSET_KEY").embed(["x"])
    wire.fail_with(429)
    with pytest.raises(RateLimited) as caught:
        OpenAIEmbedder(wire.base_url, "m").embed(["x"])
    assert caught.value.status == 429


def test_a_store_with_a_remote_embedder_records_its_vector_length(
    wire: OpenAIWireServer, project: Path, make_kb: Callable[..., KnowledgeBase]
) -> None:
    paths = write_corpus(project)
    kb = make_kb(embedder=OpenAIEmbedder(wire.base_url, "embed-small"))
    report = kb.ingest([paths["notes/bread.txt"]], allowed_roots=[project])
    assert report.chunks == kb.count() == 1
    kb.close()

    reopened = make_kb(embedder=OpenAIEmbedder(wire.base_url, "embed-small"))
    assert [h.path for h in reopened.search("bread", min_score=-1.0)] == [
        str(paths["notes/bread.txt"])
    ]
    with pytest.raises(KbUnavailable):
        make_kb(embedder=HashingEmbedder())


# --- the kb.ingest tool -----------------------------------------------------------------


async def test_kb_ingest_is_a_tool_denied_unless_allowed(project: Path) -> None:
    write_configured_project(project)
    write_corpus(project)
    registry, _ = default_registry(plugins=False)
    kb = agent_kb(project)
    ctx = ToolContext(agent_id="demo/zeus", cwd=project, kb=kb)
    try:
        with pytest.raises(ToolDenied):
            await registry.for_agent(["kb.search"]).call("kb.ingest", {"paths": ["docs"]}, ctx)
        assert not (project / ".ateam" / "agents" / "zeus" / "kb").exists()

        policy = registry.for_agent(["kb.*"])
        assert "kb.ingest" in {spec["name"] for spec in policy.schemas()}
        report = await policy.call("kb.ingest", {"paths": ["docs"]}, ctx)
        hits = await policy.call("kb.search", {"query": "rediss TLS connection"}, ctx)
    finally:
        kb.close()
    assert sorted(Path(doc["path"]).name for doc in report["ingested"]) == [
        "install.md",
        "redis.md",
    ]
    assert hits[0]["path"] == str(project / "docs" / "redis.md")


async def test_kb_ingest_refuses_paths_outside_the_sandbox(project: Path, tmp_path: Path) -> None:
    write_configured_project(project)
    outside = tmp_path / "secret.md"
    outside.write_text("# Secret\n\nnot for the agent\n")
    (project / "escape").symlink_to(tmp_path)
    registry, _ = default_registry(plugins=False)
    policy = registry.for_agent(["kb.ingest"])
    kb = agent_kb(project)
    ctx = ToolContext(agent_id="demo/zeus", cwd=project, kb=kb)
    try:
        for path in (str(outside), "../secret.md", "escape/secret.md", "/dev/zero"):
            with pytest.raises(KbDenied) as caught:
                await policy.call("kb.ingest", {"paths": [path]}, ctx)
            assert caught.value.code == "kb.ingest.denied"
        assert await kb.documents("agent") == []
    finally:
        kb.close()


def test_secrets_in_an_ingested_file_are_masked_before_they_are_stored(
    make_kb: Callable[..., KnowledgeBase], project: Path, tmp_path: Path
) -> None:
    from ateam.redact import Redactor

    key = "ghp_" + "Kd8s7F6g5H4j3K2l1Z0x9C8v7B6n5M4q3W2e"
    env = project / "deploy.md"
    env.write_text(f"# Deploy with {key}\n\nPush with GITHUB_TOKEN={key} to the mirror.\n")
    kb = make_kb(redact=Redactor().redact)

    report = kb.ingest([env], allowed_roots=[project])

    assert report.chunks >= 1
    (chunk,) = kb.export([report.ingested[0]["doc_id"]])
    assert "GITHUB_TOKEN=****" in chunk["text"] and key not in chunk["text"]
    assert chunk["metadata"]["title"] == "Deploy with ****"
    for path in (tmp_path / "kb").rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
