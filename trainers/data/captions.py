"""Caption augmentation as sd-scripts does it: keep tokens, shuffle, tag and caption dropout, prefix/suffix.

Torch-free. Every random choice comes from the `random.Random` the caller passes, seeded per
sample and epoch (see seeds.py), so a caption's variant does not depend on the process count.
"""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class CaptionOptions:
    split_on: str = ","  # captions are lists of tags separated by this
    join_with: str = ", "  # ... and are put back together with this
    shuffle_p: float = 0.0  # share of samples whose tags are shuffled (1.0 = shuffle_caption)
    keep_tokens: int = 0  # leading tags never shuffled or dropped
    keep_tokens_separator: str = ""  # "fixed ||| shuffled ||| fixed suffix", when the caption has it
    dropout_rate: float = 0.0  # share of samples trained with an empty caption
    tag_dropout_rate: float = 0.0  # share of (non-kept) tags left out
    prefix: str = ""  # added before the caption after shuffling, with a space (never dropped alone)
    suffix: str = ""

    @property
    def is_fixed(self) -> bool:
        """The caption of an image is the same every epoch (so text-encoder outputs can be cached)."""
        return not (self.shuffle_p or self.dropout_rate or self.tag_dropout_rate)


def process_caption(caption: str, opts: CaptionOptions, rng: random.Random) -> str:
    if opts.dropout_rate and rng.random() < opts.dropout_rate:
        return ""
    fixed, flex, fixed_suffix = _split(caption, opts)
    if flex and opts.shuffle_p and (opts.shuffle_p >= 1 or rng.random() < opts.shuffle_p):
        rng.shuffle(flex)
    if opts.tag_dropout_rate:
        flex = [tag for tag in flex if rng.random() >= opts.tag_dropout_rate]
    text = opts.join_with.join(fixed + flex + fixed_suffix)
    return " ".join(part for part in (opts.prefix.strip(), text, opts.suffix.strip()) if part)


def _split(caption: str, opts: CaptionOptions) -> tuple[list[str], list[str], list[str]]:
    """(kept tags, tags that may be shuffled or dropped, kept trailing tags)."""
    def tags(text: str) -> list[str]:
        return [t.strip() for t in text.split(opts.split_on) if t.strip()]

    sep = opts.keep_tokens_separator
    if sep and sep in caption:
        head, rest = caption.split(sep, 1)
        middle, _, tail = rest.partition(sep)
        return tags(head), tags(middle), tags(tail)
    all_tags = tags(caption)
    if not (opts.shuffle_p or opts.tag_dropout_rate):
        return all_tags, [], []
    return all_tags[: opts.keep_tokens], all_tags[opts.keep_tokens:], []
