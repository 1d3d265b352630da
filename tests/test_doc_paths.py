"""The repository names nothing outside itself (CONTRIBUTING.md §2): every document it cites, in
code, comments, configuration and docs, is one of its own files, and every section it cites is a
heading of that file.

- A document path (``docs/design.md``, ``../README.md``, ``docs/chaos.md#…``, a Markdown link's
  target) resolves to a file of the repository: from the citing file's folder, or from the root.
- A section citation is ``<path>.md §N`` (or ``§N, §M``), and ``N`` numbers a heading of that
  document (``## 4. …``, ``### 4.2 …``). In a Markdown document a ``§N`` without a path is one of
  its own sections; anywhere else a ``§`` must follow the document it cites.
- No file names the notes that once lived beside the repository, or a path outside it
  (``FORBIDDEN``): what they said is in docs/design.md, docs/rocketmq-protocol.md and
  CONTRIBUTING.md.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".pyi", ".md", ".toml", ".yaml", ".yml", ".tpl", ".txt", ".cfg", ".ini",
                 ".sh", ".proto", ".json", ".mjs", ".js"}  # fmt: skip
TEXT_NAMES = {"Makefile", "Dockerfile", "run", ".dockerignore", ".gitignore"}
SKIPPED_DIRS = {".git", ".venv", "node_modules", "build", "__pycache__", ".mypy_cache",
                ".ruff_cache", ".pytest_cache", ".hypothesis", ".import_linter_cache"}  # fmt: skip
# Top-level folders of a developer's own runs (make run's data, a reconciliation's output).
SKIPPED_TOP = {"data", "reconciliation"}
SKIPPED_NAMES = {"package-lock.json"}
GENERATED = re.compile(r"_pb2(_grpc)?\.pyi?$")
# Test modules whose strings are made-up examples for a checker, not citations: only their
# comments and docstrings are read.
MADE_UP_EXAMPLES = {
    "tests/test_doc_paths.py": "this checker's own made-up documents and citations",
    "tests/test_comment_rules.py": "made-up comments that the comment rules are tested on",
}
# Files that runs write, named where they are written: outputs, not documents. build/ is the
# folder of every make target's output; table.md is the chaos suite's table (chaos/__main__.py).
OUTPUT_FOLDER = "build/"
OUTPUT_NAMES = {"table.md"}

# Names of documents outside the repository, and paths that lead out of it. Built from parts so
# that this file, which must name them to forbid them, is scanned like any other.
_OUTSIDE = "shared"
FORBIDDEN = re.compile(
    rf"\.\./{_OUTSIDE}\b"
    rf"|(?<![\w/]){_OUTSIDE}/(?:spec|DESIGN|STYLE|ENVIRONMENT)"
    r"|/work/"
    r"|\b(?:DESIGN|STYLE|ENVIRONMENT)\.md\b"
    r"|\b(?:DESIGN|STYLE)\s+§"
    r"|(?<![\w./-])spec\s+§"
)
# A document path: ends in .md, or starts at docs/.
MD_PATH = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)*[\w-][\w./-]*?\.md)(?![\w-])")
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]*[\w/-])")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A section citation: the document (a path, or a Markdown link to it), then its sections.
SECTIONS = r"§\s?\d+(?:\.\d+)*(?:(?:,\s*|\s+and\s+)§\s?\d+(?:\.\d+)*)*"
CITATION = re.compile(
    rf"(?:\[[^\]]*\]\((?P<link>[^)#\s]+\.md)(?:#[^)\s]*)?\)|(?P<path>[\w./-]+\.md))(?:'s)?"
    rf"\s+(?P<sections>{SECTIONS})"
)
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def text_files() -> list[Path]:
    found = []
    for path in REPO.rglob("*"):
        relative = path.relative_to(REPO)
        parts = relative.parts
        if set(parts) & SKIPPED_DIRS or parts[0] in SKIPPED_TOP or not path.is_file():
            continue
        if any(part.endswith(".egg-info") for part in parts) or GENERATED.search(path.name):
            continue
        if path.name in SKIPPED_NAMES:
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            found.append(path)
    return sorted(found)


def resolves(target: str, citing: Path, repo: Path = REPO) -> bool:
    """A path, as cited from ``citing``, is a file or folder inside the repository."""
    target = target.split("#", 1)[0].rstrip(".,;:")
    if not target or target.startswith(OUTPUT_FOLDER) or target in OUTPUT_NAMES:
        return True
    for base in (citing.parent, repo, repo / "docs"):
        candidate = (base / target).resolve()
        if candidate.is_relative_to(repo) and candidate.exists():
            return True
    return False


def in_url(text: str, start: int) -> bool:
    """The match at ``start`` is part of a URL (its word holds ``://``)."""
    word_start = max(text.rfind(c, 0, start) for c in " \t\n(<'\"`") + 1
    return "://" in text[word_start:start]


def cited_paths(text: str, markdown: bool) -> Iterator[tuple[int, str]]:
    """(offset, path) of every document path cited in ``text``, each once."""
    found: set[tuple[int, str]] = set()
    for pattern in (MD_PATH, DOCS_PATH):
        for match in pattern.finditer(text):
            if not in_url(text, match.start()):
                found.add((match.start(1), match.group(1)))
    if markdown:
        for match in MD_LINK.finditer(text):
            if not re.match(r"[a-z][a-z0-9+.-]*:|#", match.group(1)):
                found.add((match.start(1), match.group(1)))
    yield from sorted(found)


def headings(document: Path) -> set[str]:
    return set(HEADING.findall(document.read_text(encoding="utf-8")))


def section_faults(text: str, citing: Path, repo: Path = REPO) -> Iterator[tuple[int, str]]:
    """(offset, why) of each section citation that does not resolve, or names no document."""
    cited: set[int] = set()
    for found in CITATION.finditer(text):
        target = found.group("link") or found.group("path")
        document = next(
            (
                (base / target).resolve()
                for base in (citing.parent, repo)
                if (base / target).resolve().is_file()
            ),
            None,
        )
        cited.update(m.start() for m in SECTION.finditer(text, found.start(), found.end()))
        if document is None or not document.is_relative_to(repo):
            yield found.start(), f"{target}: no such document in the repository"
            continue
        known = headings(document)
        for number in SECTION.findall(found.group("sections")):
            if number not in known:
                yield found.start(), f"{target} has no section {number}"
    own = headings(citing) if citing.suffix == ".md" else set()
    for found in SECTION.finditer(text):
        if found.start() in cited:
            continue
        if citing.suffix != ".md":
            yield found.start(), "a § citation must follow the document it cites (<path>.md §N)"
        elif found.group(1) not in own:
            yield found.start(), f"this document has no section {found.group(1)}"


def readable_text(path: Path) -> str:
    """What is checked of a file: all of it, but for a module of made-up examples, its comments
    and docstrings alone (other lines left blank, so that line numbers stay)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.relative_to(REPO).as_posix() not in MADE_UP_EXAMPLES:
        return text
    source = text.splitlines()
    kept = [""] * len(source)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            kept[token.start[0] - 1] = token.string
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                assert value.end_lineno is not None
                for number in range(value.lineno, value.end_lineno + 1):
                    kept[number - 1] = source[number - 1]
    return "\n".join(kept)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def test_every_cited_document_and_section_is_in_the_repository() -> None:
    faults = []
    for path in text_files():
        text = readable_text(path)
        name = path.relative_to(REPO).as_posix()
        for offset, target in cited_paths(text, path.suffix == ".md"):
            if not resolves(target, path):
                faults.append(f"{name}:{line_of(text, offset)}: {target}: not in the repository")
        for offset, why in section_faults(text, path):
            faults.append(f"{name}:{line_of(text, offset)}: {why}")
    if faults:
        pytest.fail("citations that do not resolve:\n" + "\n".join(faults), False)


def test_nothing_names_a_document_outside_the_repository() -> None:
    faults = []
    for path in text_files():
        text = readable_text(path)
        for found in FORBIDDEN.finditer(text):
            name = path.relative_to(REPO).as_posix()
            faults.append(f"{name}:{line_of(text, found.start())}: {found.group(0)!r}")
    if faults:
        pytest.fail(
            "these name documents or paths outside the repository; cite docs/design.md, "
            "docs/rocketmq-protocol.md or CONTRIBUTING.md instead:\n" + "\n".join(faults),
            False,
        )


# -- the checks' own checks, on made-up files ----------------------------------------------------


def made_up_repo(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## 1. First\n\n### 1.2 Detail\n\nSee §1.2 and [top](../README.md).\n",
        encoding="utf-8",
    )
    (tmp_path / "README.md").write_text("# Top\n", encoding="utf-8")
    (tmp_path / "part").mkdir()
    return tmp_path


def test_a_section_citation_resolves_only_to_a_heading_of_its_document(tmp_path: Path) -> None:
    repo = made_up_repo(tmp_path)
    citing = repo / "part" / "code.py"
    text = (
        "# as docs/guide.md §1 and §1.2 say\n"
        "# (docs/guide.md §1, §1.2); docs/guide.md §2; docs/other.md §1\n"
        "# a bare §3\n"
    )
    faults = [(line_of(text, offset), why) for offset, why in section_faults(text, citing, repo)]
    assert faults == [
        (2, "docs/guide.md has no section 2"),
        (2, "docs/other.md: no such document in the repository"),
        (3, "a § citation must follow the document it cites (<path>.md §N)"),
    ]


def test_a_markdown_document_cites_its_own_sections_without_a_path(tmp_path: Path) -> None:
    repo = made_up_repo(tmp_path)
    guide = repo / "docs" / "guide.md"
    assert list(section_faults(guide.read_text(encoding="utf-8"), guide, repo)) == []
    faults = list(section_faults("See §4, and [g](guide.md) §1.2.\n", guide, repo))
    assert [why for _, why in faults] == ["this document has no section 4"]


def test_paths_resolve_from_the_citing_folder_or_the_root_and_never_outside(
    tmp_path: Path,
) -> None:
    repo = made_up_repo(tmp_path)
    guide = repo / "docs" / "guide.md"
    text = (
        "[top](../README.md) docs/guide.md guide.md#first docs/missing.md "
        "[up](../../outside.md) https://example.com/x/README.md [site](https://example.com)\n"
    )
    paths = [target for _, target in cited_paths(text, markdown=True)]
    assert [p for p in paths if not resolves(p, guide, repo)] == [
        "docs/missing.md",
        "../../outside.md",
    ]
    (tmp_path.parent / "outside.md").write_text("# Not ours\n", encoding="utf-8")
    assert not resolves("../../outside.md", guide, repo)


def test_the_names_of_outside_documents_are_refused() -> None:
    outside = "shared"
    refused = [
        f"see ../{outside}/x",
        f"({outside}/spec §7)",
        "(spec §7)",
        "DESIGN §3",
        "STYLE.md",
        "ENVIRONMENT.md",
        "/work/notes",
    ]
    allowed = ["--commitlog /shared/broker", "docs/design.md §3", "pod spec", "specs §"]
    assert [text for text in refused if not FORBIDDEN.search(text)] == []
    assert [text for text in allowed if FORBIDDEN.search(text)] == []
