"""Plain text shown where the page renders Markdown or HTML: gr.Markdown, a widget's `info` help (gradio renders it
as Markdown), and gr.Info / gr.Warning toasts (HTML).

Messages and help are text, not markup: `<repeats>_<tokens>` is not an HTML tag and `*` is not emphasis. Each
character that either language reads as markup becomes a numeric character reference, which both show as the
character itself; a line break becomes <br>, so a message's lines stay lines and none starts a list or heading.
An underscore inside a word (an option's name) is left as it is: it is no emphasis there, and the name stays
searchable in the Markdown.
"""
from __future__ import annotations

import re

# Markdown's inline and HTML's markup characters; `$` starts gradio's LaTeX, `|` a table cell, `~` a strikethrough.
_MARKUP = re.compile(r"[&<>\\`*\[\]|~#$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LINE_START = re.compile(r"^[-+=.0-9]")  # a list, a setext heading or a numbered list where a line starts


def plain(text: object) -> str:
    """`text` as it reads, for a Markdown or HTML context (see the module's docstring)."""
    lines = str(text).replace("\r\n", "\n").split("\n")
    return "<br>".join(_LINE_START.sub(_reference, _MARKUP.sub(_reference, line)) for line in lines)


def code_block(text: str) -> str:
    """`text` in a monospaced Markdown block, as it is: fenced by more backticks than any run of them inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _reference(match: re.Match[str]) -> str:
    return f"&#{ord(match.group(0))};"
