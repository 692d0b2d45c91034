"""LoRA key formats, both ways, through kohya's module names (the form every tool works in).

- kohya: `lora_unet_<module>.lora_down.weight`, `.lora_up.weight`, `.alpha` (sd-scripts; A1111/Forge, ComfyUI and
  diffusers read it); LyCORIS kinds keep their own weight names under the same module names.
- diffusers: PEFT's `<component>.<layer path>.lora_A.weight` / `.lora_B.weight` (what diffusers' save_lora_weights
  writes), each module's rank and alpha in the `lora_adapter_metadata` header as diffusers reads it. A fused kohya
  module (SD3's and FLUX's q, k, v) becomes one PEFT module per layer, sharing lora_A.
- comfyui: ComfyUI's generic names, `diffusion_model.<original path>` and `text_encoders.<clip_l|clip_g|t5xxl>.
  transformer.<path>`, with kohya's weight names.

Converting kohya -> diffusers -> kohya gives the same tensors and metadata back.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from trainers.core.errors import ToolError
from trainers.loras.layers import Target, comfy_names, layer_map
from trainers.loras.lora_family import key_format
from trainers.loras.lora_fit import fits, misfit_text
from trainers.loras.lora_state import PLAIN, LoraFile, module_type
from trainers.models import LoadedModel

ADAPTER_METADATA = "lora_adapter_metadata"  # diffusers' header key (diffusers.loaders.lora_base)
TEXT_LEVEL = "text_model."  # transformers 4's level in CLIP paths; PEFT patterns leave it out to match both

Modules = dict[str, dict[str, Tensor]]  # kohya module name -> {weight name: tensor}


@dataclass
class Names:
    """A model's modules under each format's names (from its layers; see trainers/loras/layers.py)."""

    model: LoadedModel
    targets: dict[str, Target] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.targets = layer_map(self.model)
        self._comfy: dict[str, str] | None = None

    def comfy(self) -> dict[str, str]:
        if self._comfy is None:
            try:
                self._comfy = comfy_names(self.model, self.targets)
            except NotImplementedError:  # no single-file layout to name its layers from
                family = self.model.family
                saved = f": ComfyUI loads every key of the LoRA files {family.title} runs save" \
                    if family.lora_file_naming else ""
                raise ToolError("to", f"{family.title} has no single-file layout here, so ComfyUI's names of its "
                                f"layers are not known: keep the file's names (to = same){saved}") from None
        return self._comfy

    def peft_layers(self) -> dict[tuple[str, str], tuple[str, int]]:
        """(component, layer path without the text level) -> (kohya module, the layer's index in it)."""
        return {(t.component, _bare(path)): (name, index) for name, t in self.targets.items()
                for index, path in enumerate(t.paths)}


def _bare(path: str) -> str:
    return path.removeprefix(TEXT_LEVEL)


# ---- reading -------------------------------------------------------------------------------------------------

def to_kohya(lora: LoraFile, names: Names | None, option: str) -> tuple[Modules, list[str]]:
    """The file's modules under kohya's names, and the module names that match no layer of `names`' model."""
    fmt = key_format(lora.modules)
    if fmt == "kohya":
        unknown = [m for m in lora.modules if names is not None and m not in names.targets]
        return dict(lora.modules), unknown
    if names is None:
        raise ToolError(option, f"{lora.path} has {fmt} key names: give `model` (a model of its family) to map them")
    if fmt == "comfyui":
        back = {v: k for k, v in names.comfy().items()}
        found = {back[m]: parts for m, parts in lora.modules.items() if m in back}
        return found, [m for m in lora.modules if m not in back]
    if fmt == "diffusers":
        return _from_peft(lora, names, option)
    raise ToolError(option, f"{lora.path} mixes or uses other key names ({', '.join(list(lora.modules)[:3])}, ...): "
                    "only kohya, diffusers (PEFT) and ComfyUI names can be converted")


def _alphas(metadata: Mapping[str, str]) -> dict[str, dict]:
    """diffusers' per-component LoraConfig values from the header (component -> {r, lora_alpha, ...})."""
    try:
        flat = json.loads(metadata.get(ADAPTER_METADATA, "{}"))
    except ValueError:
        return {}
    out: dict[str, dict] = {}
    for key, value in flat.items() if isinstance(flat, dict) else ():
        component, _, name = key.partition(".")
        out.setdefault(component, {})[name] = value
    return out


def _pattern_value(patterns: Mapping[str, float], path: str, default: float) -> float:
    """PEFT's rank_pattern / alpha_pattern lookup: a key matches a path it ends (at a dot boundary)."""
    for pattern, value in patterns.items():
        if re.match(pattern, path) if pattern.startswith("^") else re.match(rf"(.*\.)?({pattern})$", path):
            return float(value)
    return default


def _from_peft(lora: LoraFile, names: Names, option: str) -> tuple[Modules, list[str]]:
    layers, configs = names.peft_layers(), _alphas(lora.metadata)
    per_target: dict[str, dict[int, tuple[Tensor, Tensor, float]]] = {}
    unknown = []
    for module, parts in lora.modules.items():
        component, _, path = module.partition(".")
        found = layers.get((component, _bare(path)))
        if found is None or not {"lora_A.weight", "lora_B.weight"} <= set(parts):
            unknown.append(module)
            continue
        down, up = parts["lora_A.weight"], parts["lora_B.weight"]
        change = (int(up.shape[0]), *down.shape[1:])
        weight = tuple(names.targets[found[0]].layers[found[1]].weight.shape)
        if not fits(change, weight):
            raise ToolError(option, misfit_text(lora, names.model, (module, change, weight)))
        config = configs.get(component, {})
        rank = down.shape[0]
        alpha = _pattern_value(config.get("alpha_pattern") or {}, _bare(path), float(config.get("lora_alpha", rank)))
        per_target.setdefault(found[0], {})[found[1]] = (down, up, alpha)
    return {name: _joined(names.targets[name], layers_of) for name, layers_of in per_target.items()}, unknown


def _joined(target: Target, found: dict[int, tuple[Tensor, Tensor, float]]) -> dict[str, Tensor]:
    """One kohya module from its layers' PEFT modules: a shared lora_A stays the module's down (the exact inverse of
    `_to_peft`); different ones go side by side, each layer's rows taking its own block of the rank."""
    counts = target.counts()
    first_down, _, first_alpha = next(iter(found.values()))
    shared = len(found) == len(target.layers) and all(
        torch.equal(d, first_down) and a == first_alpha for d, _, a in found.values())
    if shared:
        ups = [found[i][1] for i in range(len(target.layers))]
        return {"lora_down.weight": first_down, "lora_up.weight": target.join(ups),
                "alpha": torch.tensor(first_alpha)}
    downs, blocks = [], []
    for index, count in enumerate(counts):
        if index in found:
            down, up, alpha = found[index]
            downs.append(down.float())
            blocks.append((index, up.float() * (alpha / down.shape[0])))
    rank = sum(d.shape[0] for d in downs)
    first_up = blocks[0][1]
    per_layer = [torch.zeros((count, rank, *first_up.shape[2:])) for count in counts]
    column = 0
    for index, up in blocks:
        per_layer[index][:, column:column + up.shape[1]] = up
        column += up.shape[1]
    return {"lora_down.weight": torch.cat(downs), "lora_up.weight": target.join(per_layer),
            "alpha": torch.tensor(float(rank))}


# ---- writing -------------------------------------------------------------------------------------------------

def from_kohya(modules: Modules, fmt: str, names: Names | None,
               option: str) -> tuple[dict[str, Tensor], dict[str, str]]:
    """(tensors, header entries to add) of `modules` in the format `fmt`."""
    if fmt == "kohya":
        return {f"{m}.{s}": t for m, parts in modules.items() for s, t in parts.items()}, {}
    assert names is not None
    missing = [m for m in modules if m not in names.targets]
    if missing:
        raise ToolError(option, f"{len(missing)} modules name no layer of the model (e.g. {missing[0]}): give the "
                        "model the LoRA was trained on")
    if fmt == "comfyui":
        comfy = names.comfy()
        return {f"{comfy[m]}.{s}": t for m, parts in modules.items() for s, t in parts.items()}, {}
    return _to_peft(modules, names, option)


def _to_peft(modules: Modules, names: Names, option: str) -> tuple[dict[str, Tensor], dict[str, str]]:
    tensors: dict[str, Tensor] = {}
    ranks: dict[str, dict[str, int]] = {}
    alphas: dict[str, dict[str, float]] = {}
    for name, parts in modules.items():
        if not set(parts) <= PLAIN or "lora_down.weight" not in parts:
            raise ToolError(option, f"module {name} is {module_type(parts)}: the diffusers format holds LoRA and LoCon "
                            "weights only; convert it to comfyui or keep kohya")
        target = names.targets[name]
        down, up = parts["lora_down.weight"], parts["lora_up.weight"]
        alpha = float(parts["alpha"]) if "alpha" in parts else float(down.shape[0])
        for path, segment in zip(target.paths, target.split(up)):
            tensors[f"{target.component}.{path}.lora_A.weight"] = down.clone()  # one tensor per key on disk
            tensors[f"{target.component}.{path}.lora_B.weight"] = segment.contiguous()
            ranks.setdefault(target.component, {})[_bare(path)] = int(down.shape[0])
            alphas.setdefault(target.component, {})[_bare(path)] = alpha
    config = {}
    for component in ranks:
        r, alpha = _most_common(ranks[component]), _most_common(alphas[component])
        config.update({
            f"{component}.r": r, f"{component}.lora_alpha": alpha,
            f"{component}.target_modules": sorted(ranks[component]),
            f"{component}.rank_pattern": {re.escape(p): v for p, v in ranks[component].items() if v != r},
            f"{component}.alpha_pattern": {re.escape(p): v for p, v in alphas[component].items() if v != alpha},
        })
    return tensors, {ADAPTER_METADATA: json.dumps(config, sort_keys=True), "format": "pt"}


def _most_common(values: Mapping[str, float]) -> float:
    return Counter(values.values()).most_common(1)[0][0]
