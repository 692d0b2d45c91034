"""A training run's saves, base model and sample prompts, read from its run directory. Torch-free.

Saves come from the run's `checkpoint` events (path, epoch, step); a run without events falls back to
the saves of `<output_dir>/<output_name>` named in its config.toml (core/saves.py tells them apart).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.events import Checkpoint, read_events
from trainers.core.fsio import read_safetensors_header
from trainers.models.rules import ModelFiles
from trainers.core.options.validation import parse_resolution
from trainers.core.rundir import read_run_config, read_scores
from trainers.core.saves import SaveName, list_saves


@dataclass(frozen=True)
class Save:
    path: str
    label: str  # "epoch 2", "step 100", "final", or the file name
    epoch: int | None = None
    step: int | None = None


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.toml as one flat dict (sections merged); empty when missing or unreadable."""
    return read_run_config(run_dir) or {}


def find_saves(run_dir: Path) -> list[Save]:
    """The run's saves that still exist, oldest first (one row each in a compare grid)."""
    run_dir = Path(run_dir)
    cfg = run_config(run_dir)
    saves: dict[str, Save] = {}
    for event in read_events(run_dir):
        if isinstance(event, Checkpoint):
            name = SaveName.guess(Path(event.path).name)
            label = "final" if event.final else name.label if name else Path(event.path).stem
            saves[event.path] = Save(event.path, label, event.epoch, event.step)
    if not saves and cfg.get("output_dir") and cfg.get("output_name"):
        output_name = str(cfg["output_name"])
        for path, name in list_saves(Path(str(cfg["output_dir"])), output_name):
            if name.suffix and not name.state:  # the single files (LoRAs, full models), EMA copies too
                label = "final" if name.filename == f"{output_name}{name.suffix}" else \
                    path.name.removesuffix(name.suffix).removeprefix(f"{output_name}-")
                saves[str(path)] = Save(str(path), label, name.epoch, name.step)
        saves = dict(sorted(saves.items(), key=lambda kv: (kv[1].label == "final", kv[1].step or 0,
                                                           kv[1].epoch or 0, kv[0])))
    return [s for s in saves.values() if Path(s.path).exists()]


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


# every separate file a model is read with (a FLUX.1 transformer file's clip_l, t5xxl and ae; a Wan 2.2 pair's high-noise
# expert; Anima's adapter), and where the tokenizers such files lack are kept: Generate and the tools take them all
MODEL_FILE_OPTIONS = tuple(ModelFiles.__dataclass_fields__)


def run_model_files(cfg: dict[str, Any]) -> dict[str, str]:
    """The separate files of a run's model (a FLUX.1 transformer file's clip_l, t5xxl, ae) and its tokenizer cache."""
    return {name: str(cfg.get(name) or "") for name in MODEL_FILE_OPTIONS}


def compare_form_values(run_dir: Path) -> dict[str, Any]:
    """What the compare form is filled with for a finished run: its model, saves and sample prompts."""
    cfg = run_config(run_dir)
    values: dict[str, Any] = {"mode": "compare", "compare_run": str(run_dir), "compare_loras": [], "loras": [],
                              "model": run_base_model(run_dir), "prompts": run_sample_prompts(run_dir),
                              **run_model_files(cfg),
                              "compare_order": "likeness" if read_scores(run_dir).get("records") else "save"}
    if cfg.get("seed") is not None:
        values["seed"] = int(cfg["seed"])
    if cfg.get("sample_sampler"):
        values["sampler"] = cfg["sample_sampler"]
    try:  # the size the run trained at, not the base model's own (a 64 px demo run would render at 512)
        values["width"], values["height"] = parse_resolution(str(cfg.get("resolution", "")))
    except ValueError:
        pass
    return values


def _tensor_names(path: Path) -> list[str] | None:
    """The tensor names of a .safetensors file (header only); None when it is not one."""
    try:
        return list(read_safetensors_header(path)[0])
    except (OSError, ValueError):
        return None


def is_lora_file(path: Path) -> bool:
    """A .safetensors file whose tensors are LoRA weights (kohya, diffusers or PEFT names); reads the header only."""
    path = Path(path)
    if path.is_dir() or path.suffix.lower() != ".safetensors":
        return False
    names = _tensor_names(path) or []
    return any(k.startswith(("lora_", "lycoris_")) or ".lora_" in k or "lora_A" in k for k in names)


def lora_touches_text_encoder(path: Path) -> bool:
    """Whether a LoRA file changes the text encoder(s) (then prompt embeddings depend on it)."""
    names = _tensor_names(path)
    if names is None:
        return True  # unknown: never reuse embeddings across it
    return any(k.startswith(("lora_te", "text_encoder", "te_", "te1", "te2")) for k in names)
