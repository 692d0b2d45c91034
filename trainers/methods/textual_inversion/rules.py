"""Textual inversion's rules (torch-free): the new word is one the model's tokenizers do not know, the families it
trains, its output file.

The vocabulary is read from a local diffusers folder's tokenizer files (vocab.json, tokenizer.json), so Validate
names a known word before anything loads; the trainer checks again with the loaded tokenizers (a hub model, a
single file).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.core.options import TrainConfig
from trainers.methods.textual_inversion.options import SD_SCRIPTS
from trainers.models.checks import local_family

SUFFIX = ".safetensors"
FAMILIES = tuple(SD_SCRIPTS)  # the families whose text encoders are all CLIPs: as sd-scripts, these only
_WORD = re.compile(r"[^\s,()\[\]:]+")  # one word, none of the prompt syntax (tags, emphasis)


def token_strings(cfg: TrainConfig) -> list[str]:
    """The tokens the new word is written as inside the text encoders: 'word', 'word1', ... (as sd-scripts)."""
    word = cfg.token_string.strip()
    return [word] + [f"{word}{i}" for i in range(1, cfg.num_vectors_per_token)]


def issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found = [] if cfg.token_string.strip() else [
        ConfigIssue("token_string", "is needed: the new word to learn, as your captions write it (e.g. 'mychar')",
                    "embedding")]
    if cfg.distributed_backend != "ddp":
        found.append(ConfigIssue("distributed_backend", "shards what full finetunes train; an embedding's few "
                                 "vectors train fastest with 'ddp'", "launch"))
    if cfg.use_object_template and cfg.use_style_template:
        found.append(ConfigIssue("use_style_template", "and use_object_template are both on: choose one set of "
                                 "sentences (an object's or a style's)", "embedding"))
    return found + new_word_issues(cfg) + weights_issues(cfg)


def weights_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """A .safetensors embedding to start from whose vector count is not num_vectors_per_token (the other formats,
    and whether it fits the model, are checked when it loads)."""
    path = Path(cfg.weights.strip()).expanduser()
    if not cfg.weights.strip() or path.suffix != ".safetensors" or not path.is_file():
        return []  # none, not read here, or named by the path checks
    try:
        shapes, _ = read_safetensors_header(path)
    except (OSError, ValueError) as err:
        return [ConfigIssue("weights", f"cannot be read: {err}", "embedding")]
    counts = {shape[0] if len(shape) == 2 else 1 for shape in shapes.values()}
    if len(counts) == 1 and counts != {cfg.num_vectors_per_token}:
        count = counts.pop()
        return [ConfigIssue("num_vectors_per_token", f"is {cfg.num_vectors_per_token}, but the embedding in weights "
                            f"has {count} vector(s) per text encoder: set it to {count}", "embedding")]
    return []


def new_word_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """The problems of learning cfg.token_string (none when it is empty): LoRA's pivotal tuning has them too."""
    word = cfg.token_string.strip()
    if not word:
        return []
    found: list[ConfigIssue] = []

    def bad(message: str, name: str = "token_string", group: str = "embedding") -> None:
        found.append(ConfigIssue(name, message, group))

    if not _WORD.fullmatch(word):
        bad(f"{word!r} must be one word without spaces, commas, brackets or colons (prompt syntax), e.g. 'mychar'")
    elif word != word.lower():
        bad(f"{word!r} has capitals, which CLIP tokenizers lower before reading a prompt: write it as "
            f"{word.lower()!r}")
    else:
        for folder, vocabulary in tokenizer_vocabularies(cfg.pretrained_model_name_or_path):
            known = [t for t in token_strings(cfg) if t in vocabulary or f"{t}</w>" in vocabulary]
            if known:
                bad(f"{', '.join(map(repr, known))} is already a word of the model's tokenizer ({folder.name}), so "
                    "it cannot be learned as a new one: choose a made-up word, e.g. 'ohwx' or 'my_style'")
                break
    family = local_family(cfg.pretrained_model_name_or_path)
    if family is not None and family not in FAMILIES:
        bad(f"is a {family} model; new words are learned for {', '.join(FAMILIES)} models (whose text encoders are "
            "CLIPs)", "pretrained_model_name_or_path", "model")
    if cfg.cache_text_encoder_outputs:
        bad("cannot be used with a new word: its vectors change the text encoders' outputs at every step; turn "
            "caching off", "cache_text_encoder_outputs", "dataset")
    return found


def tokenizer_vocabularies(model: str) -> list[tuple[Path, set[str]]]:
    """(folder, its tokens) of each tokenizer of a local diffusers folder; none for a hub id or a single file."""
    root = Path(model).expanduser()
    found = []
    for folder in sorted(root.glob("tokenizer*")) if root.is_dir() else []:
        tokens: set[str] = set()
        if (folder / "vocab.json").is_file():
            tokens |= set(_json(folder / "vocab.json"))
        if (folder / "tokenizer.json").is_file():
            fast = _json(folder / "tokenizer.json")
            tokens |= set((fast.get("model") or {}).get("vocab") or {})
            tokens |= {t.get("content", "") for t in fast.get("added_tokens") or []}
        if tokens:
            found.append((folder, tokens))
    return found


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # the model checks name an unreadable model
    return data if isinstance(data, dict) else {}


def output_suffix(cfg: TrainConfig) -> str:
    return SUFFIX


def outputs(cfg: TrainConfig) -> list[Path]:
    return [Path(cfg.output_dir).expanduser() / f"{cfg.output_name}{SUFFIX}"]


def memory_tips(cfg: TrainConfig) -> list[str]:
    return [] if cfg.gradient_checkpointing else ["turn on gradient_checkpointing"]
