"""README.md stays a page a newcomer reads (the rules live in the README.md beside each
package), and every relative link in the docs leads somewhere: to a file that exists
and, for a link into a Markdown file, to a heading it has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_README_LINES = 200
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "infra").rglob("*.md")),
    *sorted((ROOT / "services").rglob("README.md")),
]
# [text](target): the target up to its closing parenthesis, no spaces.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped
    (hyphens and underscores kept), spaces as hyphens."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.DOTALL)
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def relative_links(doc: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_the_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines"


def test_the_package_readmes_exist() -> None:
    for package in ("scheduler", "runner", "compiler", "tools", "llm", "kernel", "cli"):
        assert (ROOT / "services" / package / "README.md").is_file(), package
    assert (ROOT / "services" / "dev" / "bench" / "README.md").is_file()


def test_every_relative_link_leads_somewhere() -> None:
    checked = 0
    for doc in DOCS:
        for target in relative_links(doc):
            path, _, anchor = target.partition("#")
            where = (doc.parent / path).resolve() if path else doc
            assert where.exists(), f"{doc.relative_to(ROOT)}: {target}: no such file"
            if anchor and where.suffix == ".md":
                assert anchor in anchors(where.read_text()), (
                    f"{doc.relative_to(ROOT)}: {target}: no such heading"
                )
            checked += 1
    assert checked > 30


def test_anchors_are_the_ones_github_makes() -> None:
    text = "# rote\n## 5. Environment\n## Path B: the full LLM loop\n```\n# not one\n```\n"
    assert anchors(text) == {"rote", "5-environment", "path-b-the-full-llm-loop"}
