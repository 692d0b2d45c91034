"""Caption augmentation as sd-scripts does it: wildcards, keep tokens, token warmup, shuffle, tag and caption
dropout, secondary separator, prefix/suffix.

Torch-free. Every random choice comes from the `random.Random` the caller passes, seeded per
sample and epoch (see seeds.py), so a caption's variant does not depend on the process count;
token warmup depends on the step the sample trains at, which the caller computes from its
position in the epoch (never from a shared counter).
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

_WILDCARD = re.compile(r"\{([^}]+)\}")


@dataclass(frozen=True)
class CaptionOptions:
    split_on: str = ","  # captions are lists of tags separated by this (caption_separator)
    join_with: str = ", "  # ... and are put back together with this
    shuffle_p: float = 0.0  # share of samples whose tags are shuffled (1.0 = shuffle_caption)
    keep_tokens: int = 0  # leading tags never shuffled or dropped
    keep_tokens_separator: str = ""  # "fixed ||| shuffled ||| fixed suffix", when the caption has it
    dropout_rate: float = 0.0  # share of samples trained with an empty caption
    tag_dropout_rate: float = 0.0  # share of (non-kept) tags left out
    prefix: str = ""  # added before the caption after shuffling, with a space (never dropped alone)
    suffix: str = ""
    secondary_separator: str = ""  # joins parts of one tag; becomes split_on after shuffling and dropping
    wildcard: bool = False  # {a|b|c} picks one per sample; a multi-line caption, one line per sample
    strict: bool = False  # a caption file that is not UTF-8 stops the run (text_files.py: what it is read as else)
    token_warmup_min: int = 1  # tags (after the kept ones) shown at step 0
    token_warmup_step: float = 0  # step at which every tag is shown (< 1: that share of the run's steps)

    @property
    def is_fixed(self) -> bool:
        """The caption of an image is the same every epoch (so text-encoder outputs can be cached)."""
        return not (self.shuffle_p or self.dropout_rate or self.tag_dropout_rate or self.wildcard
                    or self.token_warmup_step)


def process_caption(caption: str, opts: CaptionOptions, rng: random.Random, step: int = 0,
                    max_steps: int = 0) -> str:
    """One sample's variant of `caption` at optimizer step `step` of a run of `max_steps` (token warmup)."""
    if opts.dropout_rate and rng.random() < opts.dropout_rate:
        return ""
    if opts.wildcard:
        caption = expand_wildcards(caption, rng)
    fixed, flex, fixed_suffix = _split(caption, opts)
    flex = flex[:warmup_tags(len(flex), opts, step, max_steps)]
    if flex and opts.shuffle_p and (opts.shuffle_p >= 1 or rng.random() < opts.shuffle_p):
        rng.shuffle(flex)
    if opts.tag_dropout_rate:
        flex = [tag for tag in flex if rng.random() >= opts.tag_dropout_rate]
    text = opts.join_with.join(fixed + flex + fixed_suffix)
    if opts.secondary_separator:
        text = text.replace(opts.secondary_separator, opts.split_on)
    prefix, suffix = opts.prefix.strip(), opts.suffix.strip()
    if opts.wildcard:
        prefix, suffix = expand_wildcards(prefix, rng), expand_wildcards(suffix, rng)
    return " ".join(part for part in (prefix, text, suffix) if part)


def expand_wildcards(text: str, rng: random.Random) -> str:
    """One line of a multi-line caption, and one choice of each {a|b|c}; `{{` and `}}` are literal braces."""
    if "\n" in text:
        text = rng.choice(text.split("\n"))
    if "{" not in text:
        return text
    left, right = "\0<", ">\0"  # never in a caption read from a text file
    text = text.replace("{{", left).replace("}}", right)
    text = _WILDCARD.sub(lambda m: rng.choice(m.group(1).split("|")), text)
    return text.replace(left, "{").replace(right, "}")


def warmup_tags(count: int, opts: CaptionOptions, step: int, max_steps: int) -> int:
    """How many of `count` shuffleable tags a caption shows at `step` (token_warmup_min/step, as sd-scripts)."""
    end = warmup_end(opts.token_warmup_step, max_steps)
    if not end or step >= end:
        return count
    return math.floor(step * ((count - opts.token_warmup_min) / end)) + opts.token_warmup_min


def warmup_end(token_warmup_step: float, max_steps: int) -> float:
    """The step from which every tag is shown (0: no warmup); below 1 it is a share of the run's steps."""
    if token_warmup_step < 1:
        return math.floor(token_warmup_step * max_steps)
    return token_warmup_step


def _split(caption: str, opts: CaptionOptions) -> tuple[list[str], list[str], list[str]]:
    """(kept tags, tags that may be shuffled, dropped or warmed up, kept trailing tags)."""
    def tags(text: str) -> list[str]:
        return [t.strip() for t in text.split(opts.split_on) if t.strip()]

    sep = opts.keep_tokens_separator
    if sep and sep in caption:
        head, rest = caption.split(sep, 1)
        middle, _, tail = rest.partition(sep)
        return tags(head), tags(middle), tags(tail)
    all_tags = tags(caption)
    if not (opts.shuffle_p or opts.tag_dropout_rate or opts.token_warmup_step):
        return all_tags, [], []
    return all_tags[: opts.keep_tokens], all_tags[opts.keep_tokens:], []
