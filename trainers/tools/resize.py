"""tools resize: a LoRA (or LoCon) at another rank, as sd-scripts' resize_lora.py: a fixed rank, or per module the
rank a dynamic rule picks from its singular values. Each module's change is kept (its alpha / rank scale too);
the report says what every module kept of it."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trainers.core.errors import ToolError
from trainers.loras.lora_family import kohya_named
from trainers.loras.lora_state import (
    LowRankModule,
    alpha_text,
    dims_text,
    one_alpha,
    read_lora,
    refuse_existing,
    save_precision,
    updated_metadata,
    write_lora,
)
from trainers.tools.compute import compute_device
from trainers.tools.job import ToolJob
from trainers.tools.kept import KeptRow, kept_report
from trainers.tools.lowrank import RankRule, factor_product, shaped
from trainers.tools.options import ToolConfig


def is_spatial(module: LowRankModule) -> bool:
    return module.down.dim() == 4 and tuple(module.down.shape[2:]) != (1, 1)


def run(cfg: ToolConfig, job: ToolJob) -> Path:
    lora, naming = kohya_named(read_lora(cfg.lora, "lora"))
    modules = lora.plain("lora")
    conv_rank = cfg.new_conv_rank or cfg.new_rank
    _check_sizes(modules, cfg.new_rank, conv_rank, cfg.dynamic_method)
    suffix = f"{cfg.dynamic_method}-{cfg.dynamic_param:g}" if cfg.dynamic_method != "fixed" else f"r{cfg.new_rank}"
    out = job.output_path(f"{lora.path.stem}-{suffix}.safetensors")
    refuse_existing(out)
    old_ranks = {m.rank for m in modules.values()}
    if cfg.dynamic_method == "fixed" and cfg.new_rank > max(old_ranks):
        job.warn(f"new_rank {cfg.new_rank} is above the file's rank {max(old_ranks)}: a module's change has no more, "
                 f"so modules keep at most {max(old_ranks)}")
    device = compute_device(cfg.device)
    results, kept = {}, {}
    for done, (name, module) in enumerate(modules.items(), start=1):
        rule = RankRule(conv_rank if is_spatial(module) else cfg.new_rank, cfg.dynamic_method, cfg.dynamic_param)
        with torch.no_grad():
            factors = factor_product(module.up.flatten(1).to(device, torch.float32),
                                     module.down.flatten(1).to(device, torch.float32), rule)
        down, up = shaped(factors, (module.up.shape[0], *module.down.shape[1:]))
        results[name] = LowRankModule(down.cpu(), up.cpu(), module.scale * factors.rank)  # sd-scripts: scale kept
        kept[name] = factors
        job.progress("resizing", done, len(modules))
    results = one_alpha(results)
    tensors = {k: v for name, m in results.items() for k, v in m.tensors(name).items()}
    if naming is not None:  # written back in the naming it was read in
        tensors = naming.write(tensors)
    rows = [KeptRow.of(name, kept[name], m.alpha, was=modules[name].rank) for name, m in results.items()]
    how = (f"dynamic resize with {cfg.dynamic_method}: {cfg.dynamic_param:g} (at most {cfg.new_rank})"
           if cfg.dynamic_method != "fixed" else f"rank resized to {cfg.new_rank}"
           + (f" (conv: {conv_rank})" if conv_rank != cfg.new_rank else ""))
    metadata = updated_metadata(lora.metadata, out.stem, f"{how}, from {_ranks_text(old_ranks)}",
                                **_dims_metadata(results, lora.metadata.get("ss_network_args", "")))
    write_lora(out, tensors, metadata, save_precision(cfg.save_precision, lora.dtype()))
    job.wrote(out, "lora")
    summary, details, data = kept_report(rows)
    job.report(f"Resized {lora.path.name}", f"Wrote `{out}`: {how}.\n\n{summary}", {"output": str(out), **data},
               details)
    return out


def _ranks_text(ranks: set[int]) -> str:
    return f"rank {min(ranks)}" if len(ranks) == 1 else f"ranks {min(ranks)}-{max(ranks)}"


def _check_sizes(modules: dict[str, LowRankModule], rank: int, conv_rank: int, method: str) -> None:
    """A fixed rank above what a module's weight can hold is refused, naming the module (sd-scripts would cap it
    silently and write a file whose rank is not the one asked for)."""
    if method != "fixed":
        return
    for name, module in modules.items():
        size = min(module.up.shape[0], module.down[0].numel())
        wanted, option = (conv_rank, "new_conv_rank") if is_spatial(module) else (rank, "new_rank")
        if wanted > size:
            shape = f"{module.up.shape[0]} x {module.down[0].numel()}"
            raise ToolError(option, f"{wanted} is above what module {name} can hold (its weight is {shape}, so at most "
                            f"{size}): give at most {size}, or a dynamic_method (which caps each module at its size)")


def _dims_metadata(written: dict[str, LowRankModule], network_args: str) -> dict[str, str]:
    """ss_network_dim / ss_network_alpha (linear modules) and conv_dim / conv_alpha in ss_network_args (LoCon) of
    the result: the value when every module has the same, else "Dynamic" (as sd-scripts)."""
    def of(spatial: bool) -> tuple[str, str]:
        chosen = [m for m in written.values() if is_spatial(m) == spatial]
        return dims_text([m.rank for m in chosen]), alpha_text(chosen)

    changes = dict(zip(("ss_network_dim", "ss_network_alpha"), of(False)))
    if any(is_spatial(m) for m in written.values()):
        try:
            args = json.loads(network_args) if network_args else {}
        except ValueError:
            args = {}
        args["conv_dim"], args["conv_alpha"] = of(True)
        changes["ss_network_args"] = json.dumps(args)
    return changes
