"""A1111's "parameters" PNG text: written with every image, read back by A1111, Forge, ComfyUI and viewers.

    a dog, photo <lora:my_lora:0.8>
    Negative prompt: blurry
    Steps: 20, Sampler: Euler a, CFG scale: 7.0, Seed: 123, Size: 512x512, Model: sd15, Lora hashes: "my_lora: 0123456789ab"

Torch-free.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from trainers.core.fsio import safetensors_data_offset

NEGATIVE = "Negative prompt: "


def parameters_text(prompt: str, negative: str, fields: dict[str, Any]) -> str:
    """The text: prompt line(s), the negative prompt when there is one, then `Key: value, ...`.

    A value with a comma, colon or quote is written JSON-quoted, as A1111 does.
    """
    def value(v: Any) -> str:
        text = str(v)
        return json.dumps(text, ensure_ascii=False) if re.search(r'[,:"]', text) else text

    lines = [prompt]
    if negative:
        lines.append(NEGATIVE + negative)
    lines.append(", ".join(f"{k}: {value(v)}" for k, v in fields.items() if v is not None and v != ""))
    return "\n".join(lines)


_FIELD = re.compile(r'\s*([\w ][\w \-/+]*?):\s*("(?:\\.|[^\\"])*"|[^,]*)(?:,|$)')


def parse_parameters(text: str) -> dict[str, Any]:
    """{"prompt", "negative_prompt", and every `Key: value` field} of a parameters text."""
    *head, last = text.strip("\n").split("\n")
    if not _FIELD.match(last) or "Steps:" not in last:
        head, last = head + [last], ""
    prompt, negative, into_negative = [], [], False
    for line in head:
        if line.startswith(NEGATIVE):
            into_negative = True
            line = line[len(NEGATIVE):]
        (negative if into_negative else prompt).append(line)
    result: dict[str, Any] = {"prompt": "\n".join(prompt), "negative_prompt": "\n".join(negative)}
    for match in _FIELD.finditer(last):
        key, raw = match.group(1).strip(), match.group(2).strip()
        if not key:
            continue
        result[key] = json.loads(raw) if raw.startswith('"') else raw
    return result


def read_parameters(path: Path) -> dict[str, Any]:
    """The parsed "parameters" of a PNG; {} when it has none."""
    from PIL import Image

    with Image.open(path) as image:
        text = image.text.get("parameters") if hasattr(image, "text") else None  # type: ignore[attr-defined]
    return parse_parameters(text) if text else {}


def lora_short_hash(path: Path) -> str:
    """A1111's LoRA hash ("addnet" sha256 of the tensor data after the safetensors header), first 12 digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(safetensors_data_offset(path))
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:12]


def lora_tag(path: Path, weight: float) -> str:
    """A1111's prompt tag `<lora:name:weight>`, which reproduces the LoRA when the prompt is pasted back."""
    return f"<lora:{Path(path).stem}:{weight:g}>"
