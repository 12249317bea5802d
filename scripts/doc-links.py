#!/usr/bin/env python3
"""Checks the documentation's links offline (`make docs-check`, scripts/docs.sh).

Every Markdown link and image of the book (docs/src), README.md and ARCHITECTURE.md that is
not a URL must name a file or folder of the repository, and a `#fragment` must be a heading
of the page it names (the anchor mdBook and GitHub give it). Every page under docs/src is in
docs/src/SUMMARY.md (no orphan page), and every page SUMMARY.md lists exists.
Prints each problem as `FILE:LINE: what`, and exits 1 if there is one.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BOOK = ROOT / "docs" / "src"
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")


def prose_lines(path, keep_code=False):
    """Yields (line number, line) outside fenced code blocks, inline code removed unless
    `keep_code`."""
    fence = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.lstrip()
        if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
            fence = stripped[:3]
            continue
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        yield n, line if keep_code else CODE_SPAN.sub("", line)


def slug(heading):
    """The anchor mdBook (and GitHub) makes of a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    out = []
    for c in text.strip().lower():
        if c.isalnum() or c in "-_":
            out.append(c)
        elif c.isspace():
            out.append("-")
    return "".join(out)


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        for _, line in prose_lines(path, keep_code=True):
            m = re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else f"{s}-{k}")
        cache[path] = found
    return cache[path]


def check_links(path, problems):
    for n, line in prose_lines(path):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # a URL (https:, mailto:)
            file_part, _, frag = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{n}"
            if not dest.exists():
                problems.append(f"{where}: {target}: no such file")
                continue
            if ROOT not in dest.parents and dest != ROOT:
                problems.append(f"{where}: {target}: outside the repository")
                continue
            if frag and dest.suffix == ".md" and frag not in anchors(dest):
                problems.append(f"{where}: {target}: no heading #{frag} in {dest.relative_to(ROOT)}")


def check_summary(problems):
    summary = BOOK / "SUMMARY.md"
    listed = set()
    for n, line in prose_lines(summary):
        for m in LINK.finditer(line):
            page = (BOOK / m.group(1).partition("#")[0]).resolve()
            listed.add(page)
    for page in sorted(BOOK.rglob("*.md")):
        if page != summary and page.resolve() not in listed:
            problems.append(f"{page.relative_to(ROOT)}: not in docs/src/SUMMARY.md (an orphan page)")


def main():
    problems = []
    pages = sorted(BOOK.rglob("*.md")) + [ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    for page in pages:
        check_links(page, problems)
    check_summary(problems)
    for p in problems:
        print(p)
    if problems:
        print(f"doc-links: {len(problems)} broken link(s) or orphan page(s)", file=sys.stderr)
        return 1
    print(f"doc-links: {len(pages)} pages, every link resolves, every book page is in SUMMARY.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
