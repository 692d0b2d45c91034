"""What a dataset will look like to a run: its bucket histogram (trainers.data.buckets, the trainer's own code),
caption lengths in tokens against the text encoder's limit, images that training enlarges, duplicate files and
unreadable images. Torch-free."""
from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainers.data.buckets import BucketChooser, BucketSettings
from trainers.core.options import parse_resolution
from trainers.data.specs import bucket_settings
from trainers.dataset_edit.folders import Dataset, DatasetEditError, Entry, option_defaults
from trainers.dataset_edit.tags import split_tags

CLIP_LIMIT = 75  # CLIP reads 77 tokens: 75 of the caption between its start and end tokens
_WORDS = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class TokenCounter:
    count: Callable[[str], int]  # tokens of a caption, without start and end tokens
    how: str  # which tokenizer, for the report


def token_counter(model: str = "") -> TokenCounter:
    """The CLIP tokenizer of a diffusers model folder (its tokenizer/ files), else an estimate that counts words and
    punctuation marks (CLIP splits long or rare words into several tokens, so it counts low)."""
    folder = Path(model.strip()).expanduser() / "tokenizer" if model.strip() else None
    if folder is not None and any((folder / name).is_file() for name in ("vocab.json", "tokenizer.json")):
        from transformers import CLIPTokenizer  # torch-free; loaded only when a model folder is given

        tokenizer = CLIPTokenizer.from_pretrained(folder)
        return TokenCounter(lambda text: len(tokenizer(text, add_special_tokens=False).input_ids),
                            f"the CLIP tokenizer of {model.strip()}")
    return TokenCounter(lambda text: len(_WORDS.findall(text)),
                        "an estimate (words and punctuation marks; give a diffusers model folder for exact counts)")


def training_buckets(resolution: str, enable: bool) -> BucketSettings:
    """The buckets of a run at `resolution` (`512` or `W,H`), bucketing on or off, the other bucket options at their
    defaults: the settings the trainer builds (trainers.data.specs.bucket_settings)."""
    try:
        parse_resolution(resolution)
    except ValueError as err:
        raise DatasetEditError(f"resolution: {err}") from None
    return bucket_settings({**option_defaults(), "resolution": resolution, "enable_bucket": bool(enable)})


@dataclass
class DatasetStats:
    buckets: dict[tuple[int, int], list[Entry]] = field(default_factory=dict)  # bucket (width, height) -> images
    upscaled: list[tuple[Entry, tuple[int, int]]] = field(default_factory=list)  # smaller than their bucket
    no_bucket: list[Entry] = field(default_factory=list)  # too small for any bucket (bucket_no_upscale)
    lengths: list[tuple[Entry, int]] = field(default_factory=list)  # caption tokens
    limit: int = CLIP_LIMIT
    tokenizer: str = ""
    duplicates: list[list[Entry]] = field(default_factory=list)  # groups of byte-identical images
    unreadable: list[Entry] = field(default_factory=list)

    @property
    def over_limit(self) -> list[tuple[Entry, int]]:
        return [(e, n) for e, n in self.lengths if n > self.limit]

    def histogram(self) -> list[tuple[str, int, int]]:
        """(bucket as `WxH`, images, images x repeats) by bucket area, then width."""
        return [(f"{w}x{h}", len(found), sum(e.concept.repeats for e in found))
                for (w, h), found in sorted(self.buckets.items(), key=lambda kv: (kv[0][0] * kv[0][1], kv[0]))]


def dataset_stats(dataset: Dataset, buckets: BucketSettings, counter: TokenCounter,
                  limit: int = CLIP_LIMIT) -> DatasetStats:
    stats = DatasetStats(limit=limit, tokenizer=counter.how, unreadable=[e for e in dataset.entries if e.problem])
    chooser = BucketChooser(buckets)
    for entry in dataset.readable:
        width, height = entry.size or (0, 0)
        bucket = chooser.choose(width, height)
        if bucket is None:
            stats.no_bucket.append(entry)
            continue
        stats.buckets.setdefault(bucket, []).append(entry)
        if max(bucket[0] / width, bucket[1] / height) > 1:  # resized to cover its bucket: enlarged
            stats.upscaled.append((entry, bucket))
        stats.lengths.append((entry, counter.count(entry.caption or entry.concept.tokens)))
    stats.duplicates = duplicate_groups(dataset.readable)
    return stats


def duplicate_groups(entries: list[Entry]) -> list[list[Entry]]:
    """Images with the same bytes (SHA-256), in groups of two or more; files of a size no other has are not read."""
    by_size: dict[int, list[Entry]] = defaultdict(list)
    for entry in entries:
        by_size[entry.image.stat().st_size].append(entry)
    by_hash: dict[str, list[Entry]] = defaultdict(list)
    for same_size in (group for group in by_size.values() if len(group) > 1):
        for entry in same_size:
            by_hash[hashlib.sha256(entry.image.read_bytes()).hexdigest()].append(entry)
    return [group for group in by_hash.values() if len(group) > 1]


def tag_counts(dataset: Dataset) -> Counter[str]:
    """How many captions hold each tag (lower-cased, as kohya's ss_tag_frequency counts)."""
    return Counter(tag.lower() for e in dataset.readable for tag in set(split_tags(e.caption)))
