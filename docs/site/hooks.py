"""mkdocs hook for the course website: on a notebook page, the table of contents is built from the
headings the page really has.

mkdocs-jupyter builds a notebook page's table of contents from a markdown export of the notebook and
its headings' ids from the HTML export, and the two disagree on repeated headings ("Build it" in each
part of notebook 05: the HTML repeats the id) and on headings with code in them: the contents then link
to ids that do not exist. Here repeated ids get a suffix (_1, _2, ...) and the contents are rebuilt
from the final ids, so every link of the contents lands on its heading.
"""

from __future__ import annotations

import html
import re

from mkdocs.structure.toc import get_toc

HEADING = re.compile(r'<h([1-6])([^>]*?)\bid="([^"]+)"([^>]*)>(.*?)</h\1>', re.DOTALL)


def _nest(flat: list[dict]) -> list[dict]:
    """Flat heading tokens (level, id, name) as the nested list mkdocs' get_toc reads."""
    root: list[dict] = []
    stack: list[dict] = []
    for token in flat:
        while stack and stack[-1]["level"] >= token["level"]:
            stack.pop()
        (stack[-1]["children"] if stack else root).append(token)
        stack.append(token)
    return root


def on_page_content(content: str, page, config, files) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return content
    seen: dict[str, int] = {}
    tokens: list[dict] = []

    def unique(m: re.Match) -> str:
        level, before, ident, after, inner = m.groups()
        count = seen.get(ident, 0)
        seen[ident] = count + 1
        new = ident if count == 0 else f"{ident}_{count}"
        inner = inner.replace(f'href="#{ident}"', f'href="#{new}"')
        name = html.unescape(re.sub(r"<[^>]+>", "", inner)).replace("¶", "").strip()
        tokens.append({"level": int(level), "id": new, "name": name, "children": []})
        return f'<h{level}{before}id="{new}"{after}>{inner}</h{level}>'

    content = HEADING.sub(unique, content)
    page.toc = get_toc(_nest(tokens))
    return content
