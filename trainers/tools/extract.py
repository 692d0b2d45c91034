"""tools extract: a LoRA (or, with conv_dim, a LoCon) of what a finetuned model changed from its base, as
sd-scripts' extract_lora_from_models.py: each module's change by SVD at dim (or the rank a dynamic rule picks),
clamped at clamp_quantile; a part (the UNet, a text encoder) that changed by no more than min_diff is left out."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trainers.core.errors import ToolError
from trainers.loras.layers import Target, layer_map, load_weights, lora_module_names, stored_dtype
from trainers.loras.lora_state import LowRankModule, alpha_text, dims_text, one_alpha, refuse_existing, write_lora
from trainers.models import LoadedModel, ModelFiles
from trainers.tools.compute import compute_device
from trainers.tools.job import ToolJob
from trainers.tools.kept import KeptRow, kept_report
from trainers.tools.lowrank import RankRule, clamp_quantile, factor_matrix, shaped
from trainers.tools.options import ToolConfig
from trainers.tools.resize import is_spatial


def run(cfg: ToolConfig, job: ToolJob) -> Path:
    tuned_path = Path(cfg.model_tuned).expanduser()
    out = job.output_path(f"{tuned_path.stem if tuned_path.is_file() else tuned_path.name}-extracted-r{cfg.dim}"
                          ".safetensors")
    refuse_existing(out)
    files = ModelFiles.from_values(cfg.values)
    job.progress("loading the models", 0, 2)
    base = load_weights(cfg.model_org, "model_org", files)
    job.progress("loading the models", 1, 2)
    tuned = load_weights(cfg.model_tuned, "model_tuned", files)
    if len({tuned.family.name, base.family.name}) > 1:  # another family (SD1 and SD2 share a class)
        raise ToolError("model_tuned", f"it is of the {tuned.family.title} family and model_org of the "
                        f"{base.family.title} family: extract from a finetune of the base model")
    names = lora_module_names(base, conv=cfg.conv_dim is not None)
    base_layers, tuned_layers = layer_map(base), layer_map(tuned)
    changes = _changes(names, base_layers, tuned_layers, cfg.min_diff, job)
    device = compute_device(cfg.device)
    results, kept = {}, {}
    for done, (name, change) in enumerate(changes.items(), start=1):
        spatial = change.dim() == 4 and tuple(change.shape[2:]) != (1, 1)
        rule = RankRule(cfg.conv_dim if spatial else cfg.dim, cfg.dynamic_method, cfg.dynamic_param)
        with torch.no_grad():
            factors = factor_matrix(change.flatten(1).to(device), rule)
            factors = clamp_quantile(factors, cfg.clamp_quantile)
        down, up = shaped(factors, tuple(change.shape))
        results[name] = LowRankModule(down.cpu(), up.cpu(), float(factors.rank))  # alpha = rank, as sd-scripts
        kept[name] = factors
        job.progress("extracting", done, len(changes))
    if not results:
        raise ToolError("model_tuned", f"it differs from model_org by no more than min_diff ({cfg.min_diff:g}) "
                        "anywhere: there is nothing to extract (lower min_diff, or check the models)")
    results = one_alpha(results)
    tensors = {k: v for name, m in results.items() for k, v in m.tensors(name).items()}
    rows = [KeptRow.of(name, kept[name], m.alpha) for name, m in results.items()]
    write_lora(out, tensors, _metadata(cfg, base, out, results), _save_dtype(cfg))
    job.wrote(out, "lora")
    summary, details, data = kept_report(rows)
    job.report(f"Extracted {out.name}", f"Wrote `{out}`: what {tuned_path.name} changed from "
               f"{Path(cfg.model_org).name}.\n\n{summary}", {"output": str(out), **data}, details)
    return out


def _part(name: str) -> str:
    return name.split("_")[1]  # unet, te, te1, te2, ...


def _changes(names: list[str], base: dict[str, Target], tuned: dict[str, Target], min_diff: float,
             job: ToolJob) -> dict[str, torch.Tensor]:
    """Each module's weight change (rows in the file's order), the parts that changed by no more than min_diff left
    out (sd-scripts leaves an unchanged text encoder out)."""
    changes, largest = {}, {}
    for done, name in enumerate(names, start=1):
        before, after = base[name], tuned[name]
        if after.shape() != before.shape():
            raise ToolError("model_tuned", f"module {name} has shape {after.shape()} there and {before.shape()} in "
                            "model_org: the models are of different architectures")
        change = after.weight() - before.weight()
        changes[name] = change
        part = _part(name)
        largest[part] = max(largest.get(part, 0.0), float(change.abs().max()))
        job.progress("comparing", done, len(names))
    unchanged = {part for part, value in largest.items() if value <= min_diff}
    for part in sorted(unchanged):
        job.warn(f"{'the UNet' if part == 'unet' else 'text encoder ' + (part[2:] or '1')} changed by at most "
                 f"{largest[part]:.3g} (min_diff {min_diff:g}): left out of the LoRA")
    return {name: change for name, change in changes.items() if _part(name) not in unchanged}


def _save_dtype(cfg: ToolConfig) -> torch.dtype:
    from trainers.models.single_file import SAVE_DTYPES

    return stored_dtype(Path(cfg.model_tuned).expanduser()) if cfg.save_precision == "auto" else \
        SAVE_DTYPES[cfg.save_precision]


def _metadata(cfg: ToolConfig, base: LoadedModel, out: Path, written: dict[str, LowRankModule]) -> dict[str, str]:
    """sd-scripts' minimum metadata of an extracted LoRA, with the family's own keys."""
    from datetime import datetime

    v_pred = base.prediction_type == "v_prediction"
    family = base.family.lora_metadata(v_pred)
    linear = [m for m in written.values() if not is_spatial(m)]
    conv = [m for m in written.values() if is_spatial(m)]
    args = {"conv_dim": dims_text([m.rank for m in conv]), "conv_alpha": alpha_text(conv)} if conv else {}
    values = {
        "ss_network_module": "networks.lora", **family,
        "ss_network_dim": dims_text([m.rank for m in linear]), "ss_network_alpha": alpha_text(linear),
        "ss_network_args": json.dumps(args), "ss_sd_model_name": Path(cfg.model_org).name,
        "ss_training_comment": f"extracted from {Path(cfg.model_tuned).name} against {Path(cfg.model_org).name} "
                               f"(dim {cfg.dim}, {cfg.dynamic_method}, clamp_quantile {cfg.clamp_quantile:g})",
        "modelspec.sai_model_spec": "1.0.1", "modelspec.title": out.stem,
        "modelspec.date": datetime.now().isoformat(timespec="seconds"),
        "modelspec.prediction_type": None if base.family.objective == "flow" else "v" if v_pred else "epsilon",
    }
    return {k: str(v) for k, v in values.items() if v is not None}

