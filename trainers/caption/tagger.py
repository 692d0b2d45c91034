"""The WD14 family of taggers (SmilingWolf's wd-*-tagger models and their kin) through onnxruntime.

A tagger folder holds model.onnx (input: a batch of square BGR images, 0-255, NHWC; output: one probability per
tag) and selected_tags.csv (`tag_id,name,category,count`; category 9 rating, 0 general, 4 character), as those models
ship. Each image is padded to a white square and resized to the model's input size, as their reference code does.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from trainers.caption.options import JobConfig
from trainers.core.errors import ToolError

MODEL_FILE, TAGS_FILE = "model.onnx", "selected_tags.csv"
RATING, GENERAL, CHARACTER = 9, 0, 4
# tags whose underscores are the tag itself (SmilingWolf's list), kept as written when replace_underscores is on
KAOMOJIS = frozenset({"0_0", "(o)_(o)", "+_+", "+_-", "._.", "<o>_<o>", "<|>_<|>", "=_=", ">_<", "3_3", "6_9", ">_o",
                      "@_@", "^_^", "o_o", "u_u", "x_x", "|_|", "||_||"})


@dataclass(frozen=True)
class TagList:
    names: list[str]
    categories: np.ndarray


def read_tags(path: Path) -> TagList:
    """selected_tags.csv: its `name` and `category` columns; a file without them is named with the fix."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise ToolError("model", f"{path} cannot be read ({err})") from None
    if not rows or not {"name", "category"} <= set(rows[0]):
        raise ToolError("model", f"{path} is not a tagger's tag list: it needs the columns name and category "
                                 "(tag_id,name,category,count, as WD14 taggers ship it)")
    return TagList([r["name"] for r in rows], np.array([int(r["category"]) for r in rows]))


def pretty(tag: str, replace_underscores: bool) -> str:
    return tag.replace("_", " ") if replace_underscores and tag not in KAOMOJIS else tag


def blacklist(cfg: JobConfig) -> set[str]:
    """tag_blacklist's tags (lines or commas), each as written and with spaces for underscores."""
    found = {t.strip() for line in cfg.tag_blacklist for t in line.split(",") if t.strip()}
    return found | {t.replace("_", " ") for t in found}


class Tagger:
    def __init__(self, folder: Path, cfg: JobConfig, device: str) -> None:
        import onnxruntime as ort

        for name in (MODEL_FILE, TAGS_FILE):
            if not (folder / name).is_file():
                raise ToolError("model", f"{folder} has no {name}: a WD14 tagger's folder holds {MODEL_FILE} and "
                                         f"{TAGS_FILE}")
        self.cfg, self.tags = cfg, read_tags(folder / TAGS_FILE)
        wanted = ["CUDAExecutionProvider"] if device == "cuda" else []
        providers = [p for p in wanted if p in ort.get_available_providers()] + ["CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(folder / MODEL_FILE), providers=providers)
        model_input = self.session.get_inputs()[0]
        self.input_name, self.size = model_input.name, int(model_input.shape[1])
        outputs = self.session.get_outputs()[0].shape[-1]
        if isinstance(outputs, int) and outputs != len(self.tags.names):
            raise ToolError("model", f"{folder}: the model scores {outputs} tags but {TAGS_FILE} lists "
                                     f"{len(self.tags.names)}; the two files are from different taggers")
        self.blacklist = blacklist(cfg)

    def _pixels(self, image: Image.Image) -> np.ndarray:
        side = max(image.size)
        square = Image.new("RGB", (side, side), (255, 255, 255))
        square.paste(image, ((side - image.width) // 2, (side - image.height) // 2))
        resized = square.resize((self.size, self.size), Image.Resampling.BICUBIC)
        return np.asarray(resized, dtype=np.float32)[:, :, ::-1]  # RGB -> BGR

    def __call__(self, images: list[Image.Image]) -> list[list[str]]:
        batch = np.stack([self._pixels(im) for im in images])
        probs = self.session.run(None, {self.input_name: batch})[0]
        return [self.tags_of(row) for row in probs]

    def tags_of(self, probs: np.ndarray) -> list[str]:
        cfg, cats, names = self.cfg, self.tags.categories, self.tags.names

        def kept(category: int, threshold: float) -> list[str]:
            index = [i for i in np.argsort(-probs) if cats[i] == category and probs[i] >= threshold]
            return [pretty(names[i], cfg.replace_underscores) for i in index]

        general = kept(GENERAL, cfg.general_threshold)
        if cfg.max_tags:
            general = general[:cfg.max_tags]
        character = kept(CHARACTER, cfg.character_threshold)
        tags = character + general if cfg.character_tags_first else general + character
        ratings = np.flatnonzero(cats == RATING)
        if cfg.include_rating and ratings.size:
            tags.insert(0, pretty(names[ratings[np.argmax(probs[ratings])]], cfg.replace_underscores))
        return [t for t in tags if t not in self.blacklist]


def load_tagger(folder: Path, cfg: JobConfig, device: Any) -> Tagger:
    return Tagger(folder, cfg, device.type)
