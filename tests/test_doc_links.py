"""Every relative link of the README and docs/ leads somewhere: the file exists and, for a Markdown page, the heading
the link names (as GitHub writes a heading's anchor) is on it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def anchors(text: str) -> set[str]:
    """GitHub's anchor of each heading outside code blocks: lower case, punctuation but `-` and `_` dropped, spaces as
    `-`, and `-1`, `-2`, ... after a repeated one."""
    found, seen, fenced = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
    return found


def links(page: Path) -> list[tuple[int, str]]:
    return [
        (number, target)
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for target in LINK.findall(line)
        if not target.startswith(("http://", "https://", "mailto:"))
    ]


def test_the_checker_reads_headings_and_links_as_github_does(tmp_path):
    assert anchors("# A: b's (c)\n## A: b's (c)\n```\n# not a heading\n```\n## x_y") == {"a-bs-c", "a-bs-c-1", "x_y"}
    page = tmp_path / "page.md"
    page.write_text("[a](b.md#c) and ![plot](d.png), [site](https://e.org)\n[f [g]](#h)\n")
    assert links(page) == [(1, "b.md#c"), (1, "d.png"), (2, "#h")]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for number, target in links(page):
        name, _, anchor = target.partition("#")
        destination = (page.parent / name).resolve() if name else page
        if not destination.exists():
            broken.append(f"{page.name}:{number}: {target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination.read_text()):
            broken.append(f"{page.name}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
