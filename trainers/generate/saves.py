"""A training run's saves, base model and sample prompts, read from its run directory. Torch-free.

Saves come from the run's `checkpoint` events (path, epoch, step); a run without events falls back to
the files `<output_dir>/<output_name>-*.safetensors` named in its config.toml.
"""
from __future__ import annotations

import json
import re
import struct
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.generate.options import GenerateConfig, LoraRef, parse_loras

if TYPE_CHECKING:
    from trainers.generate.plan import Variant


@dataclass(frozen=True)
class Save:
    path: str
    label: str  # "epoch 2", "step 100", "final", or the file name
    epoch: int | None = None
    step: int | None = None


def _events(run_dir: Path) -> list[dict[str, Any]]:
    try:
        text = (run_dir / "events.jsonl").read_text(encoding="utf-8")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.toml as one flat dict (sections merged); empty when missing or unreadable."""
    try:
        raw = tomllib.loads((Path(run_dir) / "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        flat.update(value) if isinstance(value, dict) else flat.__setitem__(key, value)
    return flat


def _label(path: Path, epoch: Any, step: Any, final: bool) -> str:
    if final:
        return "final"
    if re.search(r"-step\d+$", path.stem) and step is not None:
        return f"step {step}"
    if epoch is not None:
        return f"epoch {epoch}"
    return path.stem


def find_saves(run_dir: Path) -> list[Save]:
    """The run's saves that still exist, oldest first (one row each in a compare grid)."""
    run_dir = Path(run_dir)
    saves: dict[str, Save] = {}
    for event in _events(run_dir):
        if event.get("type") == "checkpoint" and event.get("path"):
            path = Path(event["path"])
            saves[str(path)] = Save(str(path), _label(path, event.get("epoch"), event.get("step"),
                                                       bool(event.get("final"))), event.get("epoch"), event.get("step"))
    if not saves:
        cfg = run_config(run_dir)
        out, name = cfg.get("output_dir"), cfg.get("output_name")
        if out and name:
            folder = Path(str(out)).expanduser()
            files = sorted(folder.glob(f"{glob_escape(name)}-*.safetensors"))
            files += [f for f in [folder / f"{name}.safetensors"] if f.exists()]
            for f in files:
                saves[str(f)] = Save(str(f), "final" if f.stem == name else f.stem.removeprefix(f"{name}-"))
    return [s for s in saves.values() if Path(s.path).exists()]


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def run_sample_prompts(run_dir: Path) -> list[str]:
    """The run's sample prompt lines: its sample_prompts file (when readable), then its inline lines."""
    cfg = run_config(run_dir)
    lines: list[str] = []
    prompts_file = str(cfg.get("sample_prompts", "") or "").strip()
    if prompts_file:
        try:
            lines += Path(prompts_file).expanduser().read_text(encoding="utf-8-sig").splitlines()
        except OSError:
            pass
    lines += [str(x) for x in cfg.get("sample_prompt_lines", [])]
    return [line for line in lines if line.strip() and not line.strip().startswith("#")]


def run_base_model(run_dir: Path) -> str:
    return str(run_config(run_dir).get("pretrained_model_name_or_path", "") or "")


def compare_form_values(run_dir: Path) -> dict[str, Any]:
    """What the compare form is filled with for a finished run: its model, saves and sample prompts."""
    cfg = run_config(run_dir)
    values: dict[str, Any] = {"mode": "compare", "compare_run": str(run_dir), "compare_loras": [],
                              "model": run_base_model(run_dir), "prompts": run_sample_prompts(run_dir)}
    if cfg.get("seed") is not None:
        values["seed"] = int(cfg["seed"])
    if cfg.get("sample_sampler"):
        values["sampler"] = cfg["sample_sampler"]
    return values


def is_lora_file(path: Path) -> bool:
    """A .safetensors file whose tensors are LoRA weights (kohya, diffusers or PEFT names); reads the header only."""
    path = Path(path)
    if path.is_dir() or path.suffix.lower() != ".safetensors":
        return False
    try:
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(min(size, 100 << 20)))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return any(k.startswith(("lora_", "lycoris_")) or ".lora_" in k or "lora_A" in k for k in header)


def compare_saves(cfg: GenerateConfig) -> list[Save]:
    """The grid's rows: the saves of `compare_run`, then the files of `compare_loras`."""
    rows = find_saves(Path(cfg.compare_run).expanduser()) if cfg.compare_run.strip() else []
    for ref in parse_loras(cfg.compare_loras, "compare_loras"):
        rows.append(Save(ref.path, Path(ref.path).stem))
    return rows


def compare_variants(cfg: GenerateConfig, weights: list[float]) -> list["Variant"]:
    """One variant per (save, weight); full-model saves (finetune, dreambooth) are rendered at weight 1 only."""
    from trainers.generate.plan import Variant  # plan imports this module

    base_loras = tuple(parse_loras(cfg.loras))
    saves = compare_saves(cfg)
    if not saves:
        raise ValueError("compare_run: no saves found; pick a run that saved at least once, or list compare_loras")
    full = [s for s in saves if not is_lora_file(Path(s.path))]
    if full:
        weights = [1.0]
    variants = []
    for save in saves:
        for w in weights:
            weight_label = f"weight {w:g}" if len(weights) > 1 else ""
            if save in full:
                variants.append(Variant(save.label, base_loras, model=save.path, save=save.label))
            else:
                variants.append(Variant(f"{save.label} {weight_label}".strip(), base_loras + (LoraRef(save.path, w),),
                                        save=save.label, weight_label=weight_label))
    return variants


def lora_touches_text_encoder(path: Path) -> bool:
    """Whether a LoRA file changes the text encoder(s) (then prompt embeddings depend on it)."""
    try:
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(min(size, 100 << 20)))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError):
        return True  # unknown: never reuse embeddings across it
    return any(k.startswith(("lora_te", "text_encoder", "te_", "te1", "te2")) for k in header)


def fill_from_run(cfg: GenerateConfig) -> GenerateConfig:
    """A compare job without a model or prompts takes the run's base model and sample prompts."""
    run = cfg.compare_run.strip()
    if cfg.mode != "compare" or not run or not Path(run).expanduser().is_dir():
        return cfg
    folder = Path(run).expanduser()
    changes: dict[str, Any] = {}
    if not cfg.model.strip():
        changes["model"] = run_base_model(folder)
    if not cfg.prompts and not cfg.prompts_file.strip():
        changes["prompts"] = run_sample_prompts(folder)
    return cfg.replace(**changes) if changes else cfg
