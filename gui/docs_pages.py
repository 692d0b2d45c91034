"""The project's documentation (README.md and docs/*.md, and each option's whole help) as pages under the GUI's own address, /manual/<file>, so the
page can link to it wherever the GUI runs (--listen, --share, a reverse proxy), behind the same login.

Only those markdown files are served, read from this checkout, rendered without raw HTML; headings get GitHub's
anchors (`#the-gui`), and relative links between the files work as they do on GitHub.
"""
from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from gui.option_help import help_body
from gui.session_guard import TEXT_PLAIN, PrefixMiddleware, Receive, Scope, Send, reply

PREFIX = "/manual/"
OPTION_PREFIX = "option/"  # /manual/option/<key>: one option's whole help (gui/option_help.py)
REPO = Path(__file__).resolve().parents[1]
# The page's row of links (relative: they follow a --root-path).
DOCS_LINKS = ("Docs: [Getting started](manual/README.md) · [The GUI](manual/README.md#the-gui) · "
              "[Datasets](manual/README.md#datasets) · "
              "[Stops and resuming](manual/README.md#stops-crashes-and-resuming) · "
              "[Every option](manual/docs/options.md) · [kohya configs](manual/docs/kohya.md)")


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Atelier: {title}</title>
<style>
 body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; }}
 pre {{ background: #f4f4f6; padding: .8rem; overflow-x: auto; }} code {{ font-size: .9em; }}
 table {{ border-collapse: collapse; font-size: .9rem; }} th, td {{ border: 1px solid #ccc; padding: .3rem .5rem; }}
</style></head><body>
{body}
</body></html>
"""


def doc_files(root: Path = REPO) -> dict[str, Path]:
    """URL name (relative to PREFIX) -> file, for README.md and docs/*.md of `root`."""
    files = {"README.md": root / "README.md"}
    files.update({f"docs/{p.name}": p for p in sorted((root / "docs").glob("*.md"))})
    return {name: path for name, path in files.items() if path.is_file()}


def render(markdown_text: str, title: str) -> bytes:
    """One markdown file as an HTML page: tables, code, and heading anchors as GitHub makes them."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = parser.parse(markdown_text)
    used: dict[str, int] = {}
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type == "heading_open":
            slug = _slug(inline.content)
            count = used.get(slug, 0)
            used[slug] = count + 1
            opening.attrSet("id", f"{slug}-{count}" if count else slug)
    body = parser.renderer.render(tokens, parser.options, {})
    return _PAGE.format(title=html.escape(title), body=body).encode("utf-8")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


class DocsPages(PrefixMiddleware):
    """ASGI middleware: GET /manual/<file> answers with that documentation page; everything else goes to the app."""

    prefix = PREFIX

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], root: Path = REPO) -> None:
        super().__init__(app)
        self.root = root

    async def handle(self, scope: Scope, receive: Receive, send: Send, rest: str) -> None:
        if rest.startswith(OPTION_PREFIX) and scope.get("method") in ("GET", "HEAD"):
            found = help_body(rest[len(OPTION_PREFIX):])
            if found is not None:  # an option's whole help (its widget shows the first sentence)
                title, body = found
                page = _PAGE.format(title=html.escape(title), body=body).encode("utf-8")
                await reply(send, 200, page, content_type=b"text/html; charset=utf-8")
                return
        file = doc_files(self.root).get(rest)
        if file is None or scope.get("method") not in ("GET", "HEAD"):
            await reply(send, 404, b"No such page: the manual has README.md and docs/*.md.", content_type=TEXT_PLAIN)
            return
        page = render(file.read_text(encoding="utf-8"), file.name)
        await reply(send, 200, page, content_type=b"text/html; charset=utf-8")
