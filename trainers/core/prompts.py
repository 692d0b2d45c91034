"""Sample prompts: kohya sd-scripts' prompt-file syntax.

One prompt a line; options anywhere after the prompt text:

    a dog, photo --n blurry, lowres --w 512 --h 768 --d 42 --l 7.5 --s 28

`--n` negative prompt, `--w`/`--h` size in pixels (multiples of 8), `--s` steps, `--d` seed,
`--l` (or `--cfg`) CFG scale, `--cn` a ControlNet's control image, `--ci` an edit model's input image (repeated
for models that take several), `--f` a video model's frames (musubi-tuner's option). Blank lines and lines
starting with `#` are skipped. Unlike sd-scripts, an unknown option or a bad value is an error that names the
line, not silently ignored, so a typo does not quietly render the wrong picture.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class SamplePrompt:
    prompt: str
    negative: str = ""
    width: int | None = None
    height: int | None = None
    steps: int | None = None
    seed: int | None = None
    cfg_scale: float | None = None
    index: int = 0  # position among the prompts: names the image file and picks the default seed
    control_image: str | None = None  # --cn: a ControlNet's control image (sd-scripts' option)
    edit_images: tuple[str, ...] = ()  # --ci, once per image: an edit model's input images (musubi-tuner's option)
    frames: int | None = None  # --f: a video model's clip length in frames (musubi-tuner's option)


# An option is `--name` at the start of the line or after whitespace, followed by whitespace or the end.
_OPTION = re.compile(r"(?:^|\s)--([A-Za-z]+)(?=\s|$)")


def _whole(low: int, high: int | None = None, multiple: int = 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError("is not a whole number") from None
        if value < low or high is not None and value > high:
            raise ValueError(f"must be between {low} and {high}" if high is not None else f"must be at least {low}")
        if value % multiple:
            lower = value - value % multiple
            raise ValueError(f"must be a multiple of {multiple} (e.g. {lower or multiple} or {lower + multiple})")
        return value
    return parse


def _cfg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a number of at least 0")
    return value


# option name -> (SamplePrompt field, parser of its value)
_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "n": ("negative", str),
    "w": ("width", _whole(8, 16384, multiple=8)),
    "h": ("height", _whole(8, 16384, multiple=8)),
    "s": ("steps", _whole(1, 1000)),
    "d": ("seed", _whole(0, 2**64 - 1)),
    "l": ("cfg_scale", _cfg),
    "cfg": ("cfg_scale", _cfg),
    "cn": ("control_image", str),
    "ci": ("edit_images", str),
    "f": ("frames", _whole(1, 1025)),
}
_REPEATED = {"edit_images"}  # fields an option may give several times, each adding a value


def parse_prompt_line(line: str, index: int, *, line_number: int | None = None) -> SamplePrompt | None:
    """One line -> a SamplePrompt, or None for a blank or `#` comment line.

    `line_number` (1-based) is what errors name; it defaults to `index + 1`.
    Raises ValueError naming the line, the option and the value.
    """
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    where = f"line {line_number if line_number is not None else index + 1}"
    matches = list(_OPTION.finditer(text))
    cut = matches[0].start() if matches else len(text)
    fields: dict[str, Any] = {"prompt": text[:cut].strip(), "index": index}
    for match, following in zip(matches, matches[1:] + [None]):
        name = match.group(1).lower()
        value = text[match.end():following.start() if following else len(text)].strip()
        if name not in _FIELDS:
            known = ", ".join(f"--{n}" for n in _FIELDS)
            raise ValueError(f"{where}: unknown option --{name} (known: {known})")
        field, parse = _FIELDS[name]
        if not value and name != "n":
            raise ValueError(f"{where}: --{name} needs a value")
        try:
            parsed = parse(value)
            fields[field] = (*fields.get(field, ()), parsed) if field in _REPEATED else parsed
        except ValueError as err:
            raise ValueError(f"{where}: --{name} {value!r} {err}") from None
    return SamplePrompt(**fields)


def parse_prompt_lines(lines: list[str]) -> list[SamplePrompt]:
    """Prompts given inline (e.g. in a config): the same syntax as a prompts file, one entry a line."""
    prompts: list[SamplePrompt] = []
    for number, line in enumerate(lines, start=1):
        prompt = parse_prompt_line(line, len(prompts), line_number=number)
        if prompt is not None:
            prompts.append(prompt)
    return prompts


def read_prompts(path: Path) -> list[SamplePrompt]:
    """A UTF-8 prompts file (a byte-order mark is fine). Errors name the file and the line."""
    path = Path(path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"{path}: cannot read the prompts file ({err.strerror or err})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line}: not UTF-8 text (save the file as UTF-8)") from None
    try:
        return parse_prompt_lines(text.split("\n"))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def prompts_file_missing(prompts_file: str) -> bool:
    """A prompts file is named but not there: sd-scripts trains on without its samples, and so do we (the config
    keeps the name, and loading it says so each time)."""
    text = prompts_file.strip()
    try:
        return bool(text) and not Path(text).expanduser().exists()
    except (OSError, ValueError, RuntimeError):  # the path check names what is wrong with it
        return False


def config_prompts(prompts_file: str, lines: list[str]) -> list[SamplePrompt]:
    """A run's sample prompts: those of `prompts_file` (if any and there), then the inline `lines`, numbered on."""
    found = read_prompts(Path(prompts_file)) if prompts_file.strip() and not prompts_file_missing(prompts_file) else []
    offset = len(found)
    for prompt in parse_prompt_lines(lines):
        prompt.index += offset
        found.append(prompt)
    return found
