"""Emphasis in prompts and captions, as A1111 and sd-scripts read it: (word), (word:1.3), [word].

`(text)` multiplies the weight of its tokens by 1.1, `[text]` divides it by 1.1, `(text:w)` multiplies it
by w; brackets nest. `\\(`, `\\)`, `\\[`, `\\]` and `\\\\` are the characters themselves. An unclosed
bracket still weighs what follows it; a closing one without an opening one is plain text.
Torch-free.
"""
from __future__ import annotations

import re

ROUND = 1.1
SQUARE = 1 / 1.1

_TOKEN = re.compile(r"""
    \\[()\[\]\\]          # an escaped bracket or backslash
  | \\                    # a lone backslash (dropped)
  | \( | \[               # opening brackets
  | :([+-]?[.\d]+)\)      # ':1.3)': closes a round bracket with that weight
  | \) | \]               # closing brackets
  | [^\\()\[\]:]+         # plain text
  | :                     # a colon that is not a weight
""", re.VERBOSE)


def parse_weights(text: str) -> list[tuple[str, float]]:
    """The text without its emphasis syntax, as pieces with their weights (runs of one weight merged)."""
    pieces: list[list] = []  # [text, weight]
    round_open: list[int] = []  # where each open bracket's pieces start
    square_open: list[int] = []

    def scale(start: int, factor: float) -> None:
        for piece in pieces[start:]:
            piece[1] *= factor

    for match in _TOKEN.finditer(text):
        token, weight = match.group(0), match.group(1)
        if token.startswith("\\"):
            pieces.append([token[1:], 1.0])
        elif token == "(":
            round_open.append(len(pieces))
        elif token == "[":
            square_open.append(len(pieces))
        elif weight is not None and round_open and _is_number(weight):
            scale(round_open.pop(), float(weight))
        elif token == ")" and round_open:
            scale(round_open.pop(), ROUND)
        elif token == "]" and square_open:
            scale(square_open.pop(), SQUARE)
        else:
            pieces.append([token, 1.0])
    for start in round_open:
        scale(start, ROUND)
    for start in square_open:
        scale(start, SQUARE)
    merged: list[list] = []
    for piece in pieces:
        if merged and merged[-1][1] == piece[1]:
            merged[-1][0] += piece[0]
        else:
            merged.append(piece)
    return [(t, w) for t, w in merged] or [("", 1.0)]


def strip_weights(text: str) -> str:
    """The text a weighted prompt is made of (what its tokens spell)."""
    return "".join(piece for piece, _ in parse_weights(text))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
