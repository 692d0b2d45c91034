"""What the Generate tab asks a paused run to render with its live weights (trainers/train/live_render.py): one
request, checked on both sides. The GUI checks it before writing it (rundir.write_render_request); the trainer checks
it again, and answers a bad one with a `live_render` event that says why, never with a failed run. Torch-free."""
from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

SIZE_RANGE = (64, 4096)  # pixels, a multiple of 8 (the Generate tab's width and height)
STEPS_RANGE = (1, 1000)
CFG_RANGE = (0.0, 50.0)
MULTIPLIER_RANGE = (-10.0, 10.0)  # a LoRA's weight, as the Generate tab's LoRA lines take it
SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class RenderRequest:
    """One image: left None, a setting is the run's own (its sample settings and resolution, its seed)."""

    id: str  # the request's name, which its `live_render` event carries back
    prompt: str
    negative: str = ""
    seed: int | None = None
    steps: int | None = None
    width: int | None = None
    height: int | None = None
    cfg_scale: float | None = None
    multiplier: float = 1.0  # the trained LoRA's weight in this image

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RenderRequest))


def parse_render_request(data: object) -> RenderRequest | str:
    """The request `data` (a JSON object) holds, or the reason it is refused (an unknown key named with the closest
    known one, a missing prompt, a size that is not a multiple of 8 or out of range, ...)."""
    if not isinstance(data, dict):
        return f"a render request is a JSON object, not {type(data).__name__}"
    for key in data:
        if key not in FIELDS:
            close = difflib.get_close_matches(str(key), FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(FIELDS)}"
            return f"unknown key {key!r} in the render request{hint}"
    problems: list[str] = []
    if not isinstance(data.get("id", ""), str):
        problems.append("id must be text")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        problems.append("prompt is empty: write what to render")
    if not isinstance(data.get("negative", ""), str):
        problems.append("negative must be text")
    values: dict[str, Any] = {}
    for name, low, high in (("seed", 0, SEED_MAX), ("steps", *STEPS_RANGE), ("width", *SIZE_RANGE),
                            ("height", *SIZE_RANGE)):
        value = data.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{name} {value!r} is not a whole number")
        elif not low <= value <= high:
            problems.append(f"{name} {value} must be between {low} and {high}")
        elif name in ("width", "height") and value % 8:
            lower = value - value % 8
            problems.append(f"{name} {value} must be a multiple of 8 (e.g. {lower} or {lower + 8})")
        values[name] = value
    for name, (bottom, top) in (("cfg_scale", CFG_RANGE), ("multiplier", MULTIPLIER_RANGE)):
        number = data.get(name)
        if number is None:
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            problems.append(f"{name} {number!r} is not a number")
        elif not bottom <= number <= top:
            problems.append(f"{name} {number:g} must be between {bottom:g} and {top:g}")
        values[name] = float(number)
    if problems:
        return "; ".join(problems)
    return RenderRequest(id=str(data.get("id", "")), prompt=str(prompt), negative=str(data.get("negative", "")),
                         **values)
