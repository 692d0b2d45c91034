"""Generation options, declared once: TOML sections, `--set`, CLI flags, GUI widgets and checks come from here.

Torch-free: the GUI imports this on the request path.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainers.core.fsio import read_safetensors_header
from trainers.core.options import toml_text
from trainers.core.options.jobs import NO_MIGRATIONS, job_header, job_values, options_markdown as job_docs
from trainers.core.options.loading import closest
from trainers.core.options.schema import ConfigError, ConfigIssue, Option, coerce_values
from trainers.core.options.training import BY_NAME as TRAIN_OPTIONS
from trainers.core.options.values import OptionValues
from trainers.core.prompts import SamplePrompt, config_prompts
from trainers.core.registry import FAMILY_NAMES
from trainers.core.rundir import new_run_dir
from trainers.generate.saves import (
    MODEL_FILE_OPTIONS,
    find_saves,
    run_base_model,
    run_config,
    run_model_files,
    run_sample_prompts,
)

MODES = ("generate", "compare")
SAMPLER_CHOICES: tuple[str, ...] = TRAIN_OPTIONS["sample_sampler"].choices or ()
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
MODEL_SUFFIXES = (".safetensors", ".ckpt")

# (section id, title): TOML sections and GUI groups, in order.
GEN_GROUPS: dict[str, str] = {
    "model": "Model and LoRAs",
    "prompts": "Prompts",
    "render": "Size, steps and sampler",
    "compare": "Compare saves",
    "launch": "Devices",
    "output": "Output",
}
_ANY = frozenset({"generate"})


def _opt(name: str, kind: str, default: Any, help: str, group: str, **kw: Any) -> Option:
    return Option(name, kind, default, help, group, methods=_ANY, **kw)  # type: ignore[arg-type]


GEN_OPTIONS: tuple[Option, ...] = (
    _opt("model", "str", "", "Base model: a diffusers folder, a hub id or a single .safetensors/.ckpt file.",
         "model", required=True, path="any"),
    _opt("loras", "list", [], "LoRA files, one a line: `path` or `path:weight` (weight 1 when left out; "
         "0 leaves it off).", "model"),
    _opt("model_family", "str", "auto", "Model family; auto detects it.", "model",
         choices=("auto", *FAMILY_NAMES), advanced=True),
    _opt("vae", "str", "", "Another VAE (a diffusers AutoencoderKL folder) instead of the model's.", "model",
         path="dir", advanced=True),
    # FLUX.1 from a transformer file: the same options as training (sd-scripts' names).
    *(replace(TRAIN_OPTIONS[name], methods=_ANY) for name in MODEL_FILE_OPTIONS),
    _opt("random_init", "bool", False, "Benchmarks: build the model from its configs with random weights "
         "(only the configs are read).", "model", advanced=True),
    _opt("prompts", "list", [], "One prompt a line: `a dog --n blurry --w 512 --h 768 --s 28 --d 42 --l 7` "
         "(--n negative, --w/--h size, --s steps, --d seed, --l CFG, --ci an edit model's input image, --f a video "
         "model's frames; # lines skipped).", "prompts"),
    _opt("prompts_file", "str", "", "Or a prompts file in the same syntax (read before the lines above).",
         "prompts", path="file"),
    _opt("input_image", "str", "", "Edit models (FLUX.1 Kontext, Qwen-Image-Edit and Edit-Plus, FLUX.2 with references): the image the prompts "
         "edit, "
         "resized to the output's size; a prompt's own `--ci path` (repeated for models that take several) "
         "replaces it.", "prompts", path="file"),
    _opt("negative_prompt", "str", "", "Negative prompt of the lines without --n.", "prompts"),
    _opt("images_per_prompt", "int", 1, "Images of each prompt (seeds: the prompt's seed + 0, 1, 2, ...).",
         "prompts", min=1, max=10000),
    _opt("seed", "int", 0, "Seed of the prompts without --d; -1 picks one at random (written in every image).",
         "prompts", min=-1, max=2**32 - 1),
    _opt("width", "int", None, "Width of the prompts without --w; unset: the model's native size.", "render",
         min=64, max=4096, nullable=True),
    _opt("height", "int", None, "Height of the prompts without --h; unset: the model's native size.", "render",
         min=64, max=4096, nullable=True),
    _opt("frames", "int", None, "Video models (Wan, HunyuanVideo 1.5, LTX-2): frames of each clip of the prompts "
         "without --f; unset: the family's sample length (1 + 4k frames; LTX-2 1 + 8k).", "render", min=1,
         max=1025, nullable=True),
    _opt("steps", "int", 20, "Denoising steps of the prompts without --s.", "render", min=1, max=1000),
    _opt("cfg_scale", "float", 7.0, "CFG scale of the prompts without --l.", "render", min=0, max=50),
    _opt("sampler", "str", "euler_a", "Sampler.", "render", choices=SAMPLER_CHOICES),
    _opt("batch_size", "int", 1, "Images of one prompt rendered together by a worker.", "render", min=1, max=64),
    _opt("precision", "str", "auto", "Weights' precision; auto: bf16 (or fp16) on a GPU, fp32 on the CPU.",
         "render", choices=PRECISIONS),
    _opt("clip_skip", "int", 1, "Clip skip as in A1111 and kohya (1: the last layer). SD1/SD2 only.", "render",
         min=1, max=12, advanced=True),
    _opt("compare_run", "str", "", "A training run folder: its saves (epochs or steps) become the grid's rows.",
         "compare", path="dir"),
    _opt("compare_loras", "list", [], "Or LoRA files, one a line, as the rows (used with compare_run too).",
         "compare"),
    _opt("compare_weights", "list", ["1"], "LoRA weights to render each save at (a column per prompt and weight); "
         "full-model saves are rendered once.",
         "compare"),
    _opt("compare_order", "str", "save", "Row order of the grid's saves: save (as they were written), or a run's "
         "scores highest first (likeness, fidelity; score_saves: docs/scores.md), each row labelled with its scores "
         "and the best save marked; saves without scores come last.", "compare",
         choices=("save", "likeness", "fidelity")),
    _opt("devices", "str", "auto", "auto: every GPU (a worker each), else the CPU; or `cpu`, or GPU ids `0,1`.",
         "launch"),
    _opt("num_workers", "int", 0, "Workers on the CPU (each GPU gets one); 0: one.", "launch", min=0, max=64,
         advanced=True),
    _opt("cpu_threads", "int", 0, "Torch threads of each CPU worker; 0: the cores shared among the workers.",
         "launch", min=0, max=512, advanced=True),
    _opt("name", "str", "", "Job name, part of the job folder's name.", "output"),
    _opt("output_dir", "str", "", "Folder for the images; empty: images/ in the job folder.", "output",
         path="out"),
    _opt("mode", "str", "generate", "generate: every prompt's images; compare: the grid of saves by prompts.",
         "output", choices=MODES, advanced=True),
)
GEN_BY_NAME: dict[str, Option] = {o.name: o for o in GEN_OPTIONS}
GEN_MIGRATIONS = NO_MIGRATIONS  # steps from older schema_versions of generation jobs (trainers/core/options/jobs.py)


class GenerateConfig(OptionValues):
    """Every generation option with its value (defaults filled in)."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        super().__init__(GEN_OPTIONS, values)

    def _unknown(self, name: str) -> str:
        return f"no generation option {name!r}"

    def replace(self, **changes: Any) -> "GenerateConfig":
        return GenerateConfig({**self.values, **changes})

    def to_toml(self) -> str:
        return job_header("generation job") + toml_text.dumps(self.sections(GEN_GROUPS))


def config_from_values(values: dict[str, Any]) -> GenerateConfig:
    """Check names and types of {name: value}; raise ConfigError naming every bad field."""
    def unknown(name: str) -> ConfigIssue:
        guess = closest(name, list(GEN_BY_NAME) + list(GEN_GROUPS))
        hint = f"; did you mean {guess!r}?" if guess else "; see docs/generate.md for the options"
        return ConfigIssue(name, f"unknown option {name!r}{hint}")

    return GenerateConfig(coerce_values(GEN_BY_NAME, values, unknown))


def load_generate_config(path: Path | None = None, overrides: list[str] | None = None,
                         values: dict[str, Any] | None = None) -> GenerateConfig:
    """A TOML file (sections or flat keys, migrated from its schema_version), then `--set name=value` overrides,
    then `values` (CLI flags)."""
    issues: list[ConfigIssue] = []
    flat = job_values(path, overrides, values, GEN_GROUPS, GEN_BY_NAME, issues, GEN_MIGRATIONS)
    try:
        cfg = config_from_values(flat)
    except ConfigError as err:
        raise ConfigError(issues + err.issues) from None
    if issues:
        raise ConfigError(issues)
    return cfg


# ---- values that need more than a type check ----------------------------------------------------------

@dataclass(frozen=True)
class LoraRef:
    path: str
    weight: float = 1.0

    def line(self) -> str:
        return f"{self.path}:{self.weight:g}"


def parse_lora_line(line: str, field: str = "loras", number: int = 1) -> LoraRef:
    """`path` or `path:weight` (the last colon splits only when a number follows it)."""
    text = line.strip()
    path, sep, tail = text.rpartition(":")
    weight = 1.0
    if sep and path and re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", tail):
        weight = float(tail)
        text = path.strip()
    if not math.isfinite(weight) or abs(weight) > 10:
        raise ConfigError([ConfigIssue(field, f"line {number}: weight {tail.strip()} must be between -10 and 10")])
    return LoraRef(text, weight)


def parse_loras(lines: list[str], field: str = "loras") -> list[LoraRef]:
    return [parse_lora_line(line, field, n) for n, line in enumerate(lines, start=1) if line.strip()]


def parse_weights(lines: list[str]) -> list[float]:
    weights = []
    for text in lines:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError([ConfigIssue("compare_weights", f"{text!r} is not a number (e.g. 0.5 or 1)")]) from None
        if not math.isfinite(value) or abs(value) > 10:
            raise ConfigError([ConfigIssue("compare_weights", f"{text!r} must be between -10 and 10")])
        weights.append(value)
    return weights or [1.0]


def job_prompts(cfg: GenerateConfig) -> list[SamplePrompt]:
    """The job's prompts (file first, then lines), with the default negative filled in."""
    try:
        prompts = config_prompts(cfg.prompts_file, cfg.prompts)
    except ValueError as err:
        from_file = cfg.prompts_file.strip() and str(err).startswith(str(Path(cfg.prompts_file).expanduser()))
        field = "prompts_file" if from_file else "prompts"
        raise ConfigError([ConfigIssue(field, str(err), "prompts")]) from None
    for p in prompts:
        if not p.negative and cfg.negative_prompt:
            p.negative = cfg.negative_prompt
    return prompts


def check_config(cfg: GenerateConfig) -> list[ConfigIssue]:
    """Every problem found without loading a model, each naming its field and how to fix it."""
    issues: list[ConfigIssue] = []

    def add(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, GEN_BY_NAME[name].group))

    if not cfg.model.strip():
        add("model", "give the base model: a diffusers folder, a hub id (org/name) or a .safetensors/.ckpt file")
    else:
        model = Path(cfg.model).expanduser()
        looks_local = model.is_absolute() or cfg.model.startswith((".", "~")) or model.suffix in MODEL_SUFFIXES
        if model.is_file() and model.suffix.lower() not in MODEL_SUFFIXES:
            add("model", f"{model} is a file but not a .safetensors or .ckpt checkpoint")
        elif not model.exists() and looks_local:
            add("model", f"{model} does not exist; check the path")
    for name in ("loras", "compare_loras"):
        try:
            for ref in parse_loras(getattr(cfg, name), name):
                path = Path(ref.path).expanduser()
                if not path.is_file():
                    add(name, f"{path}: no such LoRA file")
                elif path.suffix.lower() != ".safetensors":
                    add(name, f"{path}: LoRA files must be .safetensors")
                elif problem := _cut_short(path):
                    add(name, problem)
        except ConfigError as err:
            issues.extend(err.issues)
    try:
        prompts = job_prompts(cfg)
        if not prompts:
            add("prompts", "write at least one prompt (one a line), or give a prompts_file")
        for prompt in prompts:
            issues += [ConfigIssue("prompts", f"prompt {prompt.index + 1}: --ci {path!r} is not an image file: give "
                                   "the path of the image its edit starts from", "prompts")
                       for path in prompt.edit_images if not Path(path).expanduser().is_file()]
    except ConfigError as err:
        issues.extend(err.issues)
    issues += _frame_issues(cfg)
    if cfg.input_image.strip() and not Path(cfg.input_image).expanduser().is_file():
        add("input_image", f"{Path(cfg.input_image).expanduser()} is not an image file: give the image the prompts "
                           "edit (edit models only)")
    for name in ("prompts_file", "vae"):
        value = getattr(cfg, name).strip()
        if value and not Path(value).expanduser().exists():
            add(name, f"{Path(value).expanduser()} does not exist")
    for name in ("width", "height"):
        value = getattr(cfg, name)
        if value is not None and value % 8:
            add(name, f"{value} must be a multiple of 8 (e.g. {value - value % 8})")
    devices = cfg.devices.strip().lower()
    if devices not in ("auto", "cpu") and not re.fullmatch(r"\d+(\s*,\s*\d+)*", devices):
        add("devices", f"{cfg.devices!r}: write auto, cpu, or GPU ids such as 0,1")
    if cfg.mode == "compare":
        try:
            parse_weights(cfg.compare_weights)
        except ConfigError as err:
            issues.extend(err.issues)
        run = cfg.compare_run.strip()
        if run:
            folder = Path(run).expanduser()
            if not folder.is_dir():
                add("compare_run", f"{folder} is not a folder; pick a training run folder (runs/<id>)")
            elif not find_saves(folder) and not cfg.compare_loras:
                add("compare_run", f"{folder} has no saves yet (no checkpoint events nor output files)")
        elif not cfg.compare_loras:
            add("compare_run", "pick a training run, or list LoRA files in compare_loras, to compare")
    return issues


def _frame_issues(cfg: GenerateConfig) -> list[ConfigIssue]:
    """Clip lengths (the frames option, a prompt's --f) the model's causal VAE cannot make, when its family can be
    told before loading (a video family makes 1 + frame_rule x k frames)."""
    from trainers.generate.video import model_rules

    rules = model_rules(cfg.model, cfg.model_family) if cfg.model.strip() else None
    if rules is None or not rules.is_video or rules.frame_rule == 1:
        return []
    try:
        asked = [("frames", "frames", cfg.frames)] + [("prompts", f"prompt {p.index + 1}: --f", p.frames)
                                                       for p in job_prompts(cfg)]
    except ConfigError:
        asked = [("frames", "frames", cfg.frames)]
    step, issues = rules.frame_rule, []
    for name, what, count in asked:
        if count is not None and (count - 1) % step:
            lower = count - (count - 1) % step
            issues.append(ConfigIssue(name, f"{what} {count}: {rules.title} makes clips of 1 + {step}k frames "
                                            f"(e.g. {lower} or {lower + step})", GEN_BY_NAME[name].group))
    return issues


def _cut_short(path: Path) -> str | None:
    """Why a LoRA file is not a whole .safetensors file (cut short while downloading or copying, damaged), or None."""
    try:
        read_safetensors_header(path, whole=True)
    except ValueError as err:
        return str(err)
    return None


def fill_from_run(cfg: GenerateConfig) -> GenerateConfig:
    """A compare job without a model or prompts takes the run's base model and sample prompts."""
    run = cfg.compare_run.strip()
    if cfg.mode != "compare" or not run or not Path(run).expanduser().is_dir():
        return cfg
    folder = Path(run).expanduser()
    changes: dict[str, Any] = {}
    if not cfg.model.strip():
        changes["model"] = run_base_model(folder)
        changes.update({k: v for k, v in run_model_files(run_config(folder)).items() if not str(getattr(cfg, k)).strip()})
    if not cfg.prompts and not cfg.prompts_file.strip():
        changes["prompts"] = run_sample_prompts(folder)
    return cfg.replace(**changes) if changes else cfg


def new_job_dir(runs_root: Path, cfg: GenerateConfig) -> Path:
    """`<runs_root>/<stamp>-<mode>-<name>-<pid>` (not created): sorts by time, unique per launcher process."""
    name = cfg.name or (Path(cfg.compare_run).name if cfg.mode == "compare" and cfg.compare_run else "") or \
        Path(cfg.model.rstrip("/\\")).stem
    return new_run_dir(runs_root, f"{cfg.mode}-{name or 'job'}")


def options_markdown() -> str:
    """The table of generation options for docs/generate.md, by section."""
    return job_docs((f"**[{group}]** {title}", [o for o in GEN_OPTIONS if o.group == group])
                    for group, title in GEN_GROUPS.items())


def declared_size(model: str) -> int | None:
    """The size (px) a diffusers model folder says it makes, read from its configs (torch-free); None when it
    does not say (a single file, a hub id not fetched): then the family's own size applies."""
    folder = Path(model).expanduser()
    try:
        unet = json.loads((folder / "unet" / "config.json").read_text(encoding="utf-8"))
        vae = json.loads((folder / "vae" / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    size, blocks = unet.get("sample_size"), len(vae.get("block_out_channels") or ())
    return size * 2 ** (blocks - 1) if isinstance(size, int) and blocks else None
