"""Plain text shown where the page renders Markdown or HTML: gr.Markdown, a widget's `info` help (gradio renders it
as Markdown), and gr.Info / gr.Warning toasts (HTML).

Messages and help are text, not markup: `<repeats>_<tokens>` is not an HTML tag and `*` is not emphasis. Each
character that either language reads as markup becomes a numeric character reference, which both show as the
character itself; a line break becomes <br>, so a message's lines stay lines and none starts a list or heading.
"""
from __future__ import annotations

# Markdown's inline and HTML's markup characters; `$` starts gradio's LaTeX, `|` a table cell, `~` a strikethrough.
_MARKUP = "&<>\\`*_[]|~#$"
_REFERENCES = {ord(char): f"&#{ord(char)};" for char in _MARKUP}
_LINE_START = "-+=.0123456789"  # a list, a setext heading or a numbered list where a line starts


def plain(text: object) -> str:
    """`text` as it reads, for a Markdown or HTML context (see the module's docstring)."""
    lines = str(text).replace("\r\n", "\n").split("\n")
    return "<br>".join(_line(line) for line in lines)


def _line(line: str) -> str:
    escaped = line.translate(_REFERENCES)
    if escaped[:1] in _LINE_START:
        escaped = f"&#{ord(escaped[0])};{escaped[1:]}"
    return escaped
