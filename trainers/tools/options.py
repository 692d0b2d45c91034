"""The tools' options, declared once: the CLI flags, the Tools tab's forms, the TOML of a job and the checks come
from here. Each Option's `methods` are the verbs that take it. Torch-free: the GUI imports this on the request path.

Names follow sd-scripts' scripts where they have one (resize_lora.py's new_rank and dynamic_method,
merge_lora.py's ratios and concat, extract_lora_from_models.py's model_org, model_tuned, dim, conv_dim,
clamp_quantile and min_diff), so a kohya_ss user finds them.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainers.core.options.jobs import options_markdown as job_docs
from trainers.core.options.schema import ConfigError, ConfigIssue, Option
from trainers.core.options.training import BY_NAME as TRAIN_OPTIONS
from trainers.core.options.verbs import VerbConfig
from trainers.core.rundir import new_run_dir
from trainers.generate.options import parse_loras
from trainers.generate.saves import MODEL_FILE_OPTIONS, is_lora_file
from trainers.tools.blocks import parse_block_weights

JOB_METHOD = "tools"  # status.json's method of a tool job (the verb is its `verb`)

# verb -> what it does (the CLI's help and the Tools tab's sub-tabs, in this order)
VERBS: dict[str, str] = {
    "inspect": "what a LoRA or model file is: family, network type, ranks per block, metadata, which loaders take it",
    "resize": "a LoRA (or LoCon) at another rank: fixed, or chosen per module from its singular values",
    "merge": "LoRAs into a model (single file or diffusers folder), or several LoRAs into one",
    "extract": "a LoRA (or LoCon) from a finetuned model against its base",
    "convert": "LoRA key formats (kohya, diffusers/PEFT, ComfyUI), precision, and models between folder and file",
}
GROUPS: dict[str, str] = {"input": "Inputs", "rank": "Rank", "output": "Output and device"}
DYNAMIC_METHODS = ("fixed", "sv_ratio", "sv_fro", "sv_cumulative", "sv_threshold")
PRECISIONS = ("auto", "float", "fp16", "bf16")
LORA_FORMATS = ("kohya", "diffusers", "comfyui", "musubi")
MODEL_FORMATS = ("diffusers", "single_file")


def _verbs(*names: str) -> frozenset[str]:
    unknown = set(names) - set(VERBS)
    assert not unknown, f"no tool verb {unknown}"
    return frozenset(names)


def _opt(name: str, kind: str, default: Any, help: str, group: str, verbs: frozenset[str], **kw: Any) -> Option:
    return Option(name, kind, default, help, group, methods=verbs, **kw)  # type: ignore[arg-type]


_WRITERS = _verbs("resize", "merge", "extract", "convert")
_COMPUTERS = _verbs("resize", "merge", "extract")
_LOADERS = _verbs("merge", "extract", "convert")  # may load a whole model (SD3/FLUX from parts: the part files)

TOOL_OPTIONS: tuple[Option, ...] = (
    # inspect
    _opt("file", "str", "", "The file to inspect: a LoRA (.safetensors), a model (.safetensors/.ckpt) or a diffusers "
         "model folder.", "input", _verbs("inspect"), required=True, path="any"),
    _opt("model", "str", "", "Optional: the base model the LoRA is for (a diffusers folder or single file). Then its "
         "keys are checked against the model's layers, and a LoRA of another family is named.", "input",
         _verbs("inspect"), path="any"),
    # resize
    _opt("lora", "str", "", "The LoRA (or LoCon) file to resize (sd-scripts' --model).", "input", _verbs("resize"),
         required=True, path="file"),
    # merge
    _opt("loras", "list", [], "LoRA files, one a line: `path` or `path:ratio` (ratio 1 when left out).", "input",
         _verbs("merge"), required=True),
    _opt("model", "str", "", "The base model to merge into (a diffusers folder or a single .safetensors/.ckpt file); "
         "empty: the LoRAs are merged into one LoRA.", "input", _verbs("merge"), path="any"),
    _opt("lbws", "list", [], "Optional per-block ratios, one line per LoRA in the same order (as sd-scripts' --lbws): "
         "one number for every block, or 12, 17, 20 or 26 numbers (A1111's LoRA Block Weight: BASE, IN, MID, OUT). "
         "SD1/SD2/SDXL only.", "input", _verbs("merge"), advanced=True),
    _opt("lora_merge", "str", "concat", "LoRAs into one LoRA: concat keeps every rank (the result's rank is their "
         "sum; exact); svd recomputes the sum at new_rank.", "rank", _verbs("merge"), choices=("concat", "svd")),
    # extract
    _opt("model_org", "str", "", "The base model (a diffusers folder or single file).", "input", _verbs("extract"),
         required=True, path="any"),
    _opt("model_tuned", "str", "", "The finetuned model; the LoRA is what it changed from model_org.", "input",
         _verbs("extract"), required=True, path="any"),
    # convert
    _opt("input", "str", "", "The LoRA or model to convert: a .safetensors file or a diffusers model folder.", "input",
         _verbs("convert"), required=True, path="any"),
    _opt("to", "str", "kohya", "A LoRA: kohya (sd-scripts, A1111/Forge), diffusers (PEFT keys, as diffusers saves), "
         "comfyui (ComfyUI's own key names) or musubi (Z-Image: musubi-tuner's split q, k, v). A model: diffusers (a "
         "folder) or single_file. `same`: keep the layout, change the precision only.", "output", _verbs("convert"),
         choices=("same", *dict.fromkeys(LORA_FORMATS + MODEL_FORMATS))),
    _opt("model", "str", "", "A LoRA conversion: the model whose layers name its modules (a diffusers folder or "
         "single file of its family); empty: the family's published architecture (SD1, SD2 and SDXL ship one).",
         "input", _verbs("convert"), path="any"),
    # rank
    _opt("new_rank", "int", 4, "The rank of the result (resize; merge with lora_merge = svd). With a dynamic_method: "
         "the most any module keeps.", "rank", _verbs("resize", "merge"), min=1, max=4096),
    _opt("new_conv_rank", "int", None, "The rank of 3x3 conv modules (LoCon); unset: new_rank.", "rank",
         _verbs("resize", "merge"), min=1, max=4096, nullable=True),
    _opt("dim", "int", 4, "The LoRA's rank (with a dynamic_method: the most any module keeps).", "rank",
         _verbs("extract"), min=1, max=4096),
    _opt("conv_dim", "int", None, "Extract 3x3 convs too (a LoCon) at this rank; unset: linear layers and 1x1 convs "
         "only.", "rank", _verbs("extract"), min=1, max=4096, nullable=True),
    _opt("dynamic_method", "str", "fixed", "fixed: the rank above. sv_ratio: keep the singular values above "
         "largest / dynamic_param. sv_fro: the fewest that keep dynamic_param of the Frobenius norm. sv_cumulative: "
         "the fewest whose sum keeps dynamic_param of the sum. sv_threshold: those above dynamic_param.", "rank",
         _COMPUTERS - {"merge"}, choices=DYNAMIC_METHODS),
    _opt("dynamic_param", "float", None, "The dynamic_method's number: a ratio > 1 (sv_ratio), a fraction in (0, 1] "
         "(sv_fro, sv_cumulative) or a singular value > 0 (sv_threshold).", "rank", _COMPUTERS - {"merge"},
         min=0, nullable=True),
    _opt("clamp_quantile", "float", 0.99, "Clamp the extracted weights at this quantile of their values, as sd-scripts "
         "(1: no clamping, the exact low-rank delta).", "rank", _verbs("extract"), min=0.5, max=1),
    _opt("min_diff", "float", 0.01, "A component (the UNet or a text encoder) whose weights changed by no more than "
         "this is left out of the LoRA, as sd-scripts leaves an unchanged text encoder out.", "rank",
         _verbs("extract"), min=0),
    # output
    _opt("save_to", "str", "", "Where to write the result (a .safetensors file, or a folder for a diffusers model); "
         "empty: into the job's folder, downloadable from the page. An existing file is never overwritten.", "output",
         _WRITERS, path="out"),
    _opt("save_as", "str", "auto", "A merged model: as a single_file or a diffusers folder; auto: as the base model "
         "is.", "output", _verbs("merge"), choices=("auto", *MODEL_FORMATS)),
    _opt("save_precision", "str", "auto", "The result's precision (float is fp32); auto: the input's own.", "output",
         _WRITERS, choices=PRECISIONS),
    _opt("device", "str", "auto", "Where to compute: auto (the first GPU when there is one), cpu, cuda or cuda:N.",
         "output", _COMPUTERS, choices=("auto", "cpu", "cuda"), pattern=r"cuda:\d+", pattern_help="cuda:N"),
    # SD3 and FLUX.1 from single files: the part files, as training names them
    *(replace(TRAIN_OPTIONS[name], methods=_LOADERS, group="input", advanced=True) for name in MODEL_FILE_OPTIONS),
)


def options_for(verb: str) -> tuple[Option, ...]:
    """The options of one verb, in declaration order."""
    if verb not in VERBS:
        raise KeyError(f"no tool {verb!r}; the tools are {', '.join(VERBS)}")
    return tuple(o for o in TOOL_OPTIONS if verb in o.methods)


def by_name(verb: str) -> dict[str, Option]:
    return {o.name: o for o in options_for(verb)}


class ToolConfig(VerbConfig):
    """One verb's options with their values (defaults filled in)."""

    groups, command, title = GROUPS, "tools ", "tool job"

    @classmethod
    def options_for(cls, verb: str) -> tuple[Option, ...]:
        return options_for(verb)


config_from_values = ToolConfig.from_values  # check names and types of {name: value}; ConfigError names every bad one
load_tool_config = ToolConfig.load  # a job's TOML, then `--set` overrides, then values (VerbConfig.load)


# ---- checks before anything loads ---------------------------------------------------------------------------

MODEL_SUFFIXES = (".safetensors", ".ckpt")


def check_config(cfg: ToolConfig) -> list[ConfigIssue]:
    """Every problem found from the options and the files' names and headers, each naming its field and the fix."""
    issues: list[ConfigIssue] = []
    options = by_name(cfg.verb)

    def add(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, options[name].group))

    for opt in options.values():
        if opt.required and not cfg.values[opt.name]:
            add(opt.name, "give it: it is required" if opt.kind != "list" else "give at least one, one a line")
    if cfg.verb == "inspect" and cfg.file.strip():
        _exists(cfg.file, "file", add)
    if cfg.verb == "resize" and cfg.lora.strip():
        _lora_file(cfg.lora, "lora", add)
    if cfg.verb == "merge":
        _merge_issues(cfg, add)
    if cfg.verb == "extract":
        for name in ("model_org", "model_tuned"):
            if getattr(cfg, name).strip():
                _model(getattr(cfg, name), name, add)
    if cfg.verb == "convert" and cfg.input.strip() and _exists(cfg.input, "input", add):
        lora = is_lora_file(Path(cfg.input).expanduser())
        wanted = LORA_FORMATS if lora else MODEL_FORMATS
        if cfg.to not in ("same", *wanted):
            what = "a LoRA" if lora else "a model"
            add("to", f"{cfg.input} is {what}: convert it to same or {', '.join(wanted)}")
    if cfg.verb in ("inspect", "convert") and cfg.model.strip():
        _model(cfg.model, "model", add)
    if "dynamic_method" in options:
        _dynamic_issues(cfg, add)
    if "save_to" in options and cfg.save_to.strip() and Path(cfg.save_to).expanduser().is_file():
        add("save_to", f"{cfg.save_to} exists; the tools never overwrite a file: give another name")
    return issues


def _exists(text: str, name: str, add: Any) -> bool:
    if not Path(text).expanduser().exists():
        add(name, f"{Path(text).expanduser()} does not exist; check the path")
        return False
    return True


def _lora_file(text: str, name: str, add: Any) -> None:
    path = Path(text).expanduser()
    if not _exists(text, name, add):
        return
    if path.is_dir() or path.suffix.lower() != ".safetensors":
        add(name, f"{path}: a LoRA is a .safetensors file")
    elif not is_lora_file(path):
        add(name, f"{path} holds no LoRA weights (lora_down/lora_up, lora_A/lora_B): is it a model? Give a LoRA file")


def _model(text: str, name: str, add: Any) -> None:
    path = Path(text).expanduser()
    if not _exists(text, name, add):
        return
    if path.is_file() and path.suffix.lower() not in MODEL_SUFFIXES:
        add(name, f"{path} is a file but not a .safetensors or .ckpt model; give a model file or a diffusers folder")
    elif path.is_file() and is_lora_file(path):
        add(name, f"{path} is a LoRA, not a model: give the base model (a diffusers folder or a checkpoint file)")


def _merge_issues(cfg: ToolConfig, add: Any) -> None:
    try:
        refs = parse_loras(cfg.loras, "loras")
    except ConfigError as err:
        add("loras", "; ".join(issue.message for issue in err.issues))
        return
    for ref in refs:
        _lora_file(ref.path, "loras", add)
    if cfg.model.strip():
        _model(cfg.model, "model", add)
    if len(cfg.lbws) > len(refs):
        add("lbws", f"{len(cfg.lbws)} lines for {len(refs)} LoRAs: give one line per LoRA (or fewer: the rest take "
                    "every block at 1)")
    for number, line in enumerate(cfg.lbws, start=1):
        try:
            parse_block_weights(line)
        except ValueError as err:
            add("lbws", f"line {number}: {err}")
    if len(refs) < 2 and not cfg.model.strip():
        add("loras", "merging LoRAs into one LoRA takes two or more; or give a model to merge into")


def _dynamic_issues(cfg: ToolConfig, add: Any) -> None:
    method, param = cfg.dynamic_method, cfg.dynamic_param
    if method == "fixed":
        return
    if param is None:
        add("dynamic_param", f"dynamic_method {method} needs dynamic_param (see its help for the range)")
    elif method == "sv_ratio" and not param > 1:
        add("dynamic_param", f"sv_ratio keeps singular values above largest / {param:g}: give a ratio above 1")
    elif method in ("sv_fro", "sv_cumulative") and not 0 < param <= 1:
        add("dynamic_param", f"{method} keeps a fraction: give a number in (0, 1], e.g. 0.9")
    elif method == "sv_threshold" and not (param > 0 and math.isfinite(param)):
        add("dynamic_param", "sv_threshold keeps the singular values above it: give a number above 0")


# ---- job folders and docs -----------------------------------------------------------------------------------

def main_input(cfg: ToolConfig) -> str:
    """What a job works on, for its folder's name."""
    for name in ("file", "lora", "input", "model_tuned"):
        if name in cfg.values and str(cfg.values[name]).strip():
            return str(cfg.values[name])
    return (parse_loras(cfg.loras)[0].path if cfg.verb == "merge" and cfg.loras else "") or cfg.verb


def new_job_dir(runs_root: Path, cfg: ToolConfig) -> Path:
    """`<runs_root>/<stamp>-tools-<verb>-<input name>-<pid>` (not created)."""
    stem = Path(main_input(cfg).rstrip("/\\")).stem
    return new_run_dir(runs_root, f"{JOB_METHOD}-{cfg.verb}-{stem}")


def gpu_device(cfg: ToolConfig) -> str | None:
    """The GPU a job computes on as the launcher counts GPUs ("0"), "cpu", or None (`auto`: decided at run time)."""
    device = str(cfg.values.get("device", "cpu")).strip().lower()
    if device == "auto":
        return None
    found = re.fullmatch(r"cuda(?::(\d+))?", device)
    return (found[1] or "0") if found else "cpu"


def options_markdown() -> str:
    """The table of each verb's options, for docs/tools.md."""
    return job_docs((f"**tools {verb}**", options_for(verb)) for verb in VERBS)
