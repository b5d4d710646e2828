"""The docs: each file in docs/ (the archive aside) at most about 300 lines, stating the present, and every
relative link in them and in README.md reaching a file, and a heading in it, that exists."""

import re

import pytest

from tests.helpers import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
MAX_DOC_LINES = 300
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path) -> set:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_each_doc_fits_300_lines(path):
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_DOC_LINES, f"{path.name} has {lines} lines: split it by topic, history to docs/archive/"


@pytest.mark.parametrize("path", [REPO / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_relative_link_reaches_a_file_and_heading(path):
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{path.name}: links to nothing: {broken}"
