"""Bulk caption operations as pure functions of one caption. Captions are comma-separated tags (kohya, WD14) or
sentences; tag operations compare tags without case and surrounding spaces, and write tags back joined by ", "."""
from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = ", "
OPS = {  # kind -> what it does, as the page lists it
    "trigger": "add a trigger word as the first tag (where it is missing)",
    "prefix": "add text before each caption",
    "suffix": "add text after each caption",
    "replace": "find text and replace it",
    "remove_tag": "remove a tag",
    "rename_tag": "rename a tag",
    "dedupe": "remove repeated tags",
    "fix_encoding": "rewrite caption files that are not plain UTF-8 as UTF-8 (the text stays the same)",
}
NEEDS_TEXT = ("trigger", "prefix", "suffix", "replace", "remove_tag", "rename_tag")


def split_tags(caption: str) -> list[str]:
    return [tag.strip() for tag in caption.split(",") if tag.strip()]


def _key(tag: str) -> str:
    return tag.strip().casefold()


@dataclass(frozen=True)
class BulkOp:
    kind: str  # a key of OPS
    text: str = ""  # the trigger word, prefix, suffix, text to find, or tag to remove or rename
    replacement: str = ""  # replace and rename_tag: what it becomes

    def problem(self) -> str:
        """Why this operation cannot run as given ("" when it can)."""
        if self.kind not in OPS:
            return f"operation {self.kind!r} is unknown; pick one of {', '.join(OPS)}"
        if self.kind in NEEDS_TEXT and not self.text.strip():
            return f"{self.kind}: give the text (the {'tag' if 'tag' in self.kind else 'words'} to use) first"
        if self.kind == "rename_tag" and not self.replacement.strip():
            return "rename_tag: give the new tag name (to remove a tag, use remove_tag)"
        return ""

    def apply(self, caption: str) -> str:
        """The caption after this operation (the same text when it does not apply)."""
        if self.kind == "prefix":
            return self.text + caption
        if self.kind == "suffix":
            return caption + self.text
        if self.kind == "replace":
            return caption.replace(self.text, self.replacement)
        if self.kind == "fix_encoding":
            return caption
        tags = split_tags(caption)
        if self.kind == "trigger":
            if any(_key(t) == _key(self.text) for t in tags):
                return caption
            return SEPARATOR.join([self.text.strip(), *tags])
        if self.kind == "remove_tag":
            kept = [t for t in tags if _key(t) != _key(self.text)]
            return caption if kept == tags else SEPARATOR.join(kept)
        if self.kind == "rename_tag":
            renamed = [self.replacement.strip() if _key(t) == _key(self.text) else t for t in tags]
            return caption if renamed == tags else SEPARATOR.join(renamed)
        if self.kind == "dedupe":
            seen: set[str] = set()
            kept = [t for t in tags if not (_key(t) in seen or seen.add(_key(t)))]
            return caption if kept == tags else SEPARATOR.join(kept)
        raise ValueError(self.problem() or f"operation {self.kind!r} has no rule")
