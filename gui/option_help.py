"""Option help on demand: a widget's `info` is the first sentence of its option's help, with a link to the whole of
it on a page of its own (manual/option/<key>, served by gui/docs_pages.py). The full help of every widget made the
page ~170 KB heavier (each tab repeats the shared options), for text a user reads for a few fields.
"""
from __future__ import annotations

import hashlib
import html
import re

from gui.text import plain_info
from trainers.core.options import Option

SHORT_CHARS = 120  # a first sentence longer than this is cut at a word
# A sentence ends at a full stop before a space, but for abbreviations (e.g. i.e. etc. vs.).
_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)(?<!vs)\.(?=\s)")
HELP: dict[str, Option] = {}  # key -> option, for every widget built in this process


def short_help(text: str) -> str:
    """The first sentence of `text`, at most SHORT_CHARS characters (then cut at a word, with an ellipsis)."""
    end = _SENTENCE_END.search(text)
    first = text[:end.end()] if end else text
    if len(first) > SHORT_CHARS:
        first = first[:SHORT_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "\u2026"
    return first


def help_key(opt: Option) -> str:
    """The key of `opt`'s help page: its name, unless another option of that name with other help took it."""
    key = opt.name
    known = HELP.get(key)
    if known is not None and known.help != opt.help:
        key = f"{opt.name}-{hashlib.sha1(opt.help.encode('utf-8')).hexdigest()[:6]}"
    HELP.setdefault(key, opt)
    return key


def widget_info(opt: Option) -> str:
    """`opt`'s help as a widget's info: the first sentence, and a link to the rest where there is more."""
    short = short_help(opt.help)
    if short == opt.help:
        return plain_info(opt.help)
    return f"{plain_info(short)} [more](manual/option/{help_key(opt)})"  # relative: it follows a --root-path


def help_body(key: str) -> tuple[str, str] | None:
    """(title, HTML body) of the help page of option `key`; None for an unknown key."""
    opt = HELP.get(key)
    if opt is None:
        return None
    rows = [("TOML key", opt.name), ("Default", repr(opt.default)), ("Allowed", opt.allowed())]
    table = "".join(f"<tr><th>{html.escape(k)}</th><td><code>{html.escape(str(v))}</code></td></tr>"
                    for k, v in rows)
    body = (f"<h1>{html.escape(opt.name)}</h1>\n<p>{html.escape(opt.help)}</p>\n<table>{table}</table>\n"
            '<p><a href="../docs/options.md">Every training option</a> · <a href="../README.md">The manual</a></p>')
    return opt.name, body
