"""Plain text shown where the page renders markup: messages and help are text, not markup, so `<repeats>_<tokens>`
is not an HTML tag and `*` is not emphasis.

- `plain`: for gr.Markdown and for gr.Info / gr.Warning toasts (HTML). Each character that Markdown or HTML reads
  as markup becomes a numeric character reference, which both show as the character itself; a line break becomes
  <br>, so a message's lines stay lines and none starts a list or heading. An underscore inside a word (an option's
  name) is left as it is: it is no emphasis there, and the name stays searchable in the Markdown.
- `plain_info`: for a widget's `info` help. Gradio renders it with a few rules of its own after escaping HTML
  (`code`, [links](url), **strong**, __strong__, *em*, _em_, line breaks) and reads no escapes or references, so the
  characters that would start one of its marks are shown as look-alikes instead.
"""
from __future__ import annotations

import re

# Markdown's inline and HTML's markup characters; `$` starts gradio's LaTeX, `|` a table cell, `~` a strikethrough.
_MARKUP = re.compile(r"[&<>\\`*\[\]|~#$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LINE_START = re.compile(r"^[-+=.0-9]")  # a list, a setext heading or a numbered list where a line starts
# The info renderer's marks (gradio's frontend, the function that fills `.info-text`), as look-alikes.
_INFO_LOOK_ALIKES = str.maketrans({"*": "\u2217", "`": "\u02cb"})  # asterisk operator, modifier grave accent
_INFO_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # an _em_ mark: not inside a word
_INFO_LINK = "]("  # [text](url): a zero-width space keeps the two apart


def plain(text: object) -> str:
    """`text` as it reads, for gr.Markdown or a toast (see the module's docstring)."""
    lines = str(text).replace("\r\n", "\n").split("\n")
    return "<br>".join(_LINE_START.sub(_reference, _MARKUP.sub(_reference, line)) for line in lines)


def plain_info(text: str) -> str:
    """`text` as it reads, for a widget's `info` (see the module's docstring)."""
    text = _INFO_UNDERSCORE.sub("\uff3f", text.translate(_INFO_LOOK_ALIKES))  # a fullwidth low line
    return text.replace(_INFO_LINK, "]\u200b(")


def code_block(text: str) -> str:
    """`text` in a monospaced Markdown block, as it is: fenced by more backticks than any run of them inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _reference(match: re.Match[str]) -> str:
    return f"&#{ord(match.group(0))};"
