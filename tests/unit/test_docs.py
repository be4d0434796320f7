"""The README and docs/ stay short, linked and inside the repository.

Fast and offline: reads Markdown files, follows no URL. A relative link or
image must name a file of the repository, and an anchor (``#section``) a
heading of its target file, slugged the way GitHub slugs headings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DECISIONS = sorted((ROOT / "docs" / "decisions").glob("*.md"))
PAGES = [README, *DOCS, *DECISIONS, *sorted((ROOT / "templates").glob("*/README.md"))]

#: A newcomer reads the README in five minutes; the rest lives in docs/.
README_MAX_BYTES = 12_288

#: Text that points outside the repository, at a design document it does not hold.
FORBIDDEN = ("../shared", "shared/DESIGN")

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+\1")
# [text](target) and ![alt](target); the text may wrap, a "title" may follow the target.
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target, a reference definition.
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*<?(\S+?)>?(?:[ \t]+\"[^\"]*\")?[ \t]*$", re.M)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose(text: str, *, spans: bool = False) -> str:
    """`text` with fenced code blocks blanked, and code spans unless `spans`; lines kept."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line if spans else _CODE_SPAN.sub("", line))
    return "\n".join(lines)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link and image, external ones included."""
    plain = prose(text)
    matches = [*_INLINE_LINK.finditer(plain), *_REFERENCE.finditer(plain)]
    return sorted((plain.count("\n", 0, match.end(1)) + 1, match.group(1)) for match in matches)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of `path`, repeats suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    result = set()
    for line in prose(path.read_text(encoding="utf-8"), spans=True).splitlines():
        heading = _HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(page: Path) -> list[str]:
    """What is wrong with the relative links and images of `page`, one line each."""
    problems = []
    for number, target in links(page.read_text(encoding="utf-8")):
        if not target or _SCHEME.match(target) or target.startswith("//"):
            continue  # an external URL (https:, mailto:): not followed
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        file_part, _, anchor = unquote(target).partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{where} leaves the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where} names no file of the repository")
            continue
        if anchor:
            if resolved.suffix != ".md" or resolved.is_dir():
                problems.append(f"{where} has an anchor, but its target is not a Markdown file")
            elif anchor not in anchors(resolved):
                problems.append(f"{where} matches no heading of {resolved.relative_to(ROOT)}")
    return problems


def test_the_readme_stays_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, over {README_MAX_BYTES}: move detail to a page in docs/")


def test_the_docs_exist() -> None:
    names = {page.name for page in DOCS}
    assert {"design.md", "operations.md", "testing.md", "benchmarks.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    hits = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
            for number, line in enumerate(text.splitlines(), start=1)
            if any(word in line for word in FORBIDDEN)]
    assert not hits, "\n".join(hits)


def test_the_readme_links_every_docs_page() -> None:
    targets = {target.partition("#")[0] for _, target in links(README.read_text(encoding="utf-8"))}
    missing = [page.name for page in DOCS if f"docs/{page.name}" not in targets]
    assert not missing, f"README.md links no docs/ page named {missing}"


def test_the_link_checker_sees_what_it_checks(tmp_path: Path) -> None:
    assert len(links(README.read_text(encoding="utf-8"))) >= 5, "the link pattern finds no links"
    text = ("# Title\n\n## A `flag`: why\n\n[ok](#a-flag-why) [gone](#nowhere)\n"
            "![img](missing.png) [out](https://example.com) `[code](span.md)`\n"
            "```\n[in code](nothing.md)\n```\n[a wrapped\nlink](wrapped.md)\n[ref]: ref.md\n")
    assert links(text) == [(5, "#a-flag-why"), (5, "#nowhere"), (6, "https://example.com"),
                           (6, "missing.png"), (11, "wrapped.md"), (12, "ref.md")]
    assert slug("Where the Python SDK workers run: `--environment_type`") == (
        "where-the-python-sdk-workers-run---environment_type")
    assert slug("The call journal: no model call is paid twice") == (
        "the-call-journal-no-model-call-is-paid-twice")
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    assert anchors(page) == {"title", "a-flag-why"}


#: Where code and pages cite the design: its sections by title, its decision records by path.
_CITING = ["src", "tests", "templates", "tools", "benchmarks", "docs", "README.md",
           "CONTRIBUTING.md", "Makefile"]
_SECTION_CITATION = re.compile(r'design\.md[,(:]?\s*\(?((?:"[^"]+"(?:,\s*|\s+and\s+)?)+)')
_RECORD_CITATION = re.compile(r"docs/decisions/[\w.-]+\.md")


def _citing_texts() -> Iterator[tuple[Path, str]]:
    for name in _CITING:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*") if p.suffix in {".py", ".md", ".sh", ".mk", ".txt"}
            and ".pytest-tmp" not in p.parts and "__pycache__" not in p.parts)
        for file in files:
            if file == Path(__file__):
                continue
            # A citation may wrap across lines of a docstring or a comment.
            yield file, re.sub(r"\s*\n\s*(?:#+\s*)?", " ", file.read_text(encoding="utf-8"))


def design_citations() -> list[tuple[Path, str, str]]:
    """Each ``design.md, "Section"`` and ``docs/decisions/…`` citation: (file, kind, what)."""
    found = []
    for file, text in _citing_texts():
        for match in _SECTION_CITATION.finditer(text):
            found += [(file, "section", title) for title in re.findall(r'"([^"]+)"', match[1])]
        found += [(file, "record", match[0]) for match in _RECORD_CITATION.finditer(text)]
    return found


def test_every_citation_of_the_design_names_a_section_or_record_that_exists() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in design.splitlines() if line.startswith("#")]
    stale = [f"{file.relative_to(ROOT)}: {what}" for file, kind, what in design_citations()
             if (kind == "section" and not any(h.startswith(what) for h in headings))
             or (kind == "record" and not (ROOT / what).is_file())]
    assert not stale, "\n".join(stale)


def test_the_citation_check_finds_wrapped_and_listed_citations() -> None:
    text = re.sub(r"\s*\n\s*(?:#+\s*)?", " ", 'see docs/design.md, "The call\n    #  journal" and '
                  'docs/design.md ("Model API keys", "Tools and waits"); docs/decisions/x.md')
    sections = [t for m in _SECTION_CITATION.finditer(text) for t in re.findall(r'"([^"]+)"', m[1])]
    assert sections == ["The call journal", "Model API keys", "Tools and waits"]
    assert _RECORD_CITATION.findall(text) == ["docs/decisions/x.md"]
