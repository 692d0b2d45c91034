"""tools merge: LoRAs into a model's weights (sd-scripts' merge_lora.py / sdxl_merge_lora.py / flux_merge_lora.py),
or several LoRAs into one LoRA: side by side (the result's rank is their sum and its change exactly the ratios'
sum of theirs), or that sum at new_rank by SVD (svd_merge_lora.py). Per-block ratios as sd-scripts' --lbws."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from trainers.core.errors import ToolError
from trainers.generate.options import LoraRef, parse_loras
from trainers.loras.layers import layer_map, load_weights, stored_dtype
from trainers.loras.lora_family import FamilyGuess, FileNaming, guess_family, key_style, kohya_named
from trainers.loras.lora_fit import check_fit
from trainers.loras.lora_state import (
    LoraFile,
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
from trainers.models import LoadedModel, ModelFiles
from trainers.models.single_file import SAVE_DTYPES, save_full_model
from trainers.tools.blocks import BlockWeights, parse_block_weights
from trainers.tools.compute import compute_device
from trainers.tools.job import ToolJob
from trainers.tools.kept import KeptRow, kept_report
from trainers.tools.lowrank import RankRule, factor_product, shaped
from trainers.tools.options import ToolConfig
from trainers.tools.resize import is_spatial


@dataclass
class Source:
    """One LoRA of the merge, with its ratio and per-block ratios."""

    ref: LoraRef
    lora: LoraFile
    modules: dict[str, LowRankModule]
    blocks: BlockWeights
    naming: FileNaming | None  # the family's own file naming it was read from (lora: in kohya's names)

    def ratio(self, name: str) -> float:
        return self.ref.weight * self.blocks.of(name)

    def label(self) -> str:
        return f"{self.lora.path.name} x {self.ref.weight:g}"


def _sources(cfg: ToolConfig) -> list[Source]:
    sources = []
    for index, ref in enumerate(parse_loras(cfg.loras)):
        lora, naming = kohya_named(read_lora(ref.path, "loras"))
        modules = lora.plain("loras")
        line = cfg.lbws[index] if index < len(cfg.lbws) else "1"
        try:
            blocks = BlockWeights(parse_block_weights(line), key_style(modules) or "diffusers")
        except ValueError as err:
            raise ToolError("lbws", f"line {index + 1} ({lora.path.name}): {err}") from None
        sources.append(Source(ref, lora, modules, blocks, naming))
    return sources


def run(cfg: ToolConfig, job: ToolJob) -> Path:
    sources = _sources(cfg)
    if cfg.model.strip():
        return _into_model(cfg, job, sources)
    return _into_lora(cfg, job, sources)


# ---- into a model -----------------------------------------------------------------------------------------------

def _into_model(cfg: ToolConfig, job: ToolJob, sources: list[Source]) -> Path:
    base = Path(cfg.model).expanduser()
    as_file = cfg.save_as == "single_file" or (cfg.save_as == "auto" and base.is_file())
    out = job.output_path(f"{base.stem if base.is_file() else base.name}-merged" + (".safetensors" if as_file else ""))
    refuse_existing(out)
    dtype = SAVE_DTYPES[cfg.save_precision] if cfg.save_precision != "auto" else stored_dtype(base)
    job.progress("loading the model", 0, 1)
    # in the precision it is saved in: each change is computed and added in float64, and the sum rounded once
    model = load_weights(cfg.model, "model", ModelFiles.from_values(cfg.values), dtype)
    targets = layer_map(model)
    device = compute_device(cfg.device)
    total, done = sum(len(s.modules) for s in sources), 0
    for source in sources:
        _check_names(source, model, targets)
        misfit = check_fit(source.lora, source.lora.modules, model, targets)
        if misfit is not None:
            raise ToolError("loras", misfit)
    for source in sources:
        with torch.no_grad():
            for name, module in source.modules.items():
                targets[name].add(module.delta(device, torch.float64) * source.ratio(name))
                done += 1
                job.progress("merging", done, total)
    job.progress("saving", 0, 1)
    merged_from = ", ".join([base.name] + [s.label() for s in sources])
    written = save_full_model(model, out, as_diffusers=not as_file, as_single_file=as_file, dtype=dtype,
                              metadata={"modelspec.merged_from": merged_from})
    job.wrote(written[0], "model")
    job.report(f"Merged into {base.name}", f"Wrote `{written[0]}` ({model.family.title}, "
               f"{str(dtype).removeprefix('torch.')}): {merged_from}.", {"output": str(written[0]),
                                                                           "merged": [s.label() for s in sources]})
    return written[0]


def _check_names(source: Source, model: LoadedModel, targets: dict) -> None:
    """Every module must name a layer of the model: else it is a LoRA of another family (or model)."""
    unknown = [name for name in source.modules if name not in targets]
    if not unknown:
        return
    guess = FamilyGuess((source.naming.family,), "its key names") if source.naming else guess_family(source.lora)
    told = f"; it is a LoRA for {guess.text()}" if guess.found is not None and guess.found.name != model.family.name \
        else ""
    raise ToolError("loras", f"{source.lora.path.name}: {len(unknown)} of its {len(source.modules)} modules name no "
                    f"layer of this {model.family.title} model (e.g. {unknown[0]}){told}: merge it into a model of its "
                    "own family")


# ---- into one LoRA ----------------------------------------------------------------------------------------------

def _side_by_side(parts: list[tuple[LowRankModule, float]]) -> tuple[Tensor, Tensor]:
    """(up, down) whose product is sum(weight x up @ down x scale): each part's factors side by side, the weight
    and scale split between them (its sign on up)."""
    ups, downs = [], []
    for module, weight in parts:
        factor = weight * module.scale
        root = math.sqrt(abs(factor))
        ups.append(module.up.float().flatten(1) * math.copysign(root, factor))
        downs.append(module.down.float().flatten(1) * root)
    return torch.cat(ups, dim=1), torch.cat(downs)


def _into_lora(cfg: ToolConfig, job: ToolJob, sources: list[Source]) -> Path:
    _check_one_family(sources)
    first = sources[0].lora
    how = "concat" if cfg.lora_merge == "concat" else f"svd-r{cfg.new_rank}"
    out = job.output_path(f"{first.path.stem}-merged-{how}.safetensors")
    refuse_existing(out)
    device = compute_device(cfg.device)
    names = list(dict.fromkeys(name for source in sources for name in source.modules))
    results, kept = {}, {}
    for done, name in enumerate(names, start=1):
        parts = [(s.modules[name], s.ratio(name)) for s in sources if name in s.modules and s.ratio(name) != 0]
        if not parts:
            continue
        _check_shapes(name, [(s, s.modules[name]) for s in sources if name in s.modules])
        sample = parts[0][0]
        up, down = _side_by_side(parts)
        if cfg.lora_merge == "svd":
            rule = RankRule((cfg.new_conv_rank or cfg.new_rank) if is_spatial(sample) else cfg.new_rank)
            with torch.no_grad():
                factors = factor_product(up.to(device), down.to(device), rule)
            down_t, up_t = shaped(factors, (sample.up.shape[0], *sample.down.shape[1:]))
            kept[name] = factors
        else:
            down_t = down.reshape(down.shape[0], *sample.down.shape[1:])
            up_t = up.reshape(up.shape[0], up.shape[1], *sample.up.shape[2:])
        results[name] = LowRankModule(down_t.cpu(), up_t.cpu(), float(down_t.shape[0]))  # alpha = rank: scale 1
        job.progress("merging", done, len(names))
    results = one_alpha(results)
    tensors = _in_their_naming({k: v for name, m in results.items() for k, v in m.tensors(name).items()}, sources)
    rows = [KeptRow.of(name, factors, results[name].alpha) for name, factors in kept.items()]
    written = [m.rank for m in results.values()]
    labels = " + ".join(s.label() for s in sources)
    comment = f"merged {labels} ({'ranks side by side' if cfg.lora_merge == 'concat' else how})"
    metadata = updated_metadata(first.metadata, out.stem, comment, ss_network_dim=dims_text(written),
                                ss_network_alpha=alpha_text(list(results.values())),
                                **{"modelspec.merged_from": labels})
    dtype = save_precision(cfg.save_precision, first.dtype())
    write_lora(out, tensors, metadata, dtype)
    job.wrote(out, "lora")
    summary, details, data = kept_report(rows) if rows else ("Every module keeps every rank (exact).", "", {})
    job.report(f"Merged {len(sources)} LoRAs", f"Wrote `{out}`: {comment}.\n\n{summary}",
               {"output": str(out), "merged": [s.label() for s in sources], **data}, details)
    return out


def _in_their_naming(tensors: dict[str, Tensor], sources: list[Source]) -> dict[str, Tensor]:
    """The merged LoRA in its family's own file naming when a source was in it and it names every module; else in
    kohya's names."""
    namings = [s.naming for s in sources if s.naming is not None]
    if not namings:
        return tensors
    paths = {name: path for naming in namings for name, path in naming.paths.items()}
    if any(key.partition(".")[0] not in paths for key in tensors):
        return tensors
    return FileNaming(namings[0].family, paths).write(tensors)


def _check_one_family(sources: list[Source]) -> None:
    told = [(s, s.naming.family if s.naming else guess_family(s.lora).found) for s in sources]
    families = {f.name: (s, f) for s, f in told if f is not None}
    if len(families) > 1:
        (a, fa), (b, fb) = list(families.values())[:2]
        raise ToolError("loras", f"{a.lora.path.name} is a {fa.title} LoRA and {b.lora.path.name} a {fb.title} one: "
                        "only LoRAs of one family merge")
    styles = {key_style(s.modules) for s in sources} - {None}
    if len(styles) > 1:
        raise ToolError("loras", "the LoRAs name their UNet modules in different ways (SGM and diffusers): they are of "
                        "different model families")


def _check_shapes(name: str, found: list[tuple[Source, LowRankModule]]) -> None:
    shapes = {(tuple(m.up.shape[:1]), tuple(m.down.shape[1:])) for _, m in found}
    if len(shapes) > 1:
        files = ", ".join(f"{s.lora.path.name} {tuple(m.up.shape[:1]) + tuple(m.down.shape[1:])}" for s, m in found)
        raise ToolError("loras", f"module {name} changes weights of different shapes ({files}): the LoRAs are of "
                        "different models")
