"""A model's layers under the names LoRA files give them: kohya's (`lora_unet_...`, `lora_te1_...`), diffusers'
(`unet.<path>` / `transformer.<path>`, `text_encoder.<path>`) and ComfyUI's (`diffusion_model.<original path>`,
`text_encoders.clip_l.transformer.<path>`).

A Target is one kohya module: one layer, or (SD3's and FLUX's reference names) several layers that read the same
input and are one fused layer in the file, their output rows stacked in the file's order. The names come from the
code that trains and loads LoRAs (the family's lora_targets, the SGM renamer, the text encoders' classic names), so a
converted file names what a trained one does. `skeleton` builds a model's modules without weights (on the meta
device) when only the names are needed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from trainers.core.errors import ToolError
from trainers.loras.lycoris_files import kohya_modules
from trainers.methods.lora.lycoris_net import _classic
from trainers.models import LoadedModel, ModelFiles, load_model
from trainers.models.convert import ConversionError, unet_to_ldm_key
from trainers.models.families import family as family_named
from trainers.models.rules import SINGLE_FILE_SUFFIXES, checkpoint_rules, folder_rules, read_json
from trainers.models.single_file.checkpoint import open_checkpoint

COMFY_UNET = "diffusion_model."
COMFY_TEXT = "text_encoders."


@dataclass(frozen=True)
class Target:
    """One kohya module of a model and the layers it covers."""

    name: str
    layers: tuple[nn.Module, ...]  # Linear / Conv2d
    paths: tuple[str, ...]  # each layer's path in its component (text encoders: with the `text_model.` level)
    component: str  # the pipeline's name of the component: unet, transformer, text_encoder, text_encoder_2, ...
    rows: tuple[Tensor | None, ...]  # per layer: its rows in the file's order (None: as they are)

    def counts(self) -> list[int]:
        return [int(layer.weight.shape[0]) for layer in self.layers]

    def shape(self) -> tuple[int, ...]:
        """The shape of the module's weight as the file sees it (the layers' rows stacked)."""
        return (sum(self.counts()), *self.layers[0].weight.shape[1:])

    def split(self, stacked: Tensor) -> list[Tensor]:
        """Rows in the file's order -> each layer's rows in its own order."""
        parts, start = [], 0
        for count, order in zip(self.counts(), self.rows):
            segment = stacked[start:start + count]
            if order is not None:
                segment = torch.empty_like(segment).index_copy_(0, order.to(segment.device), segment)
            parts.append(segment)
            start += count
        return parts

    def join(self, per_layer: list[Tensor]) -> Tensor:
        """Each layer's rows -> the rows in the file's order (split's inverse)."""
        return torch.cat([part if order is None else part[order.to(part.device)]
                          for part, order in zip(per_layer, self.rows)])

    def weight(self) -> Tensor:
        return self.join([layer.weight.detach().float() for layer in self.layers])

    @torch.no_grad()
    def add(self, change: Tensor) -> None:
        """Add a change (rows in the file's order) to the layers' weights, rounded once to their precision: the sum
        is formed in float64, so a half-precision weight becomes the nearest value to weight + change (not the sum
        of the weight and the change already rounded to its precision)."""
        for layer, part in zip(self.layers, self.split(change)):
            weight = layer.weight
            weight.copy_(rounded(weight.double() + part.to(weight.device, torch.float64), weight.dtype))


def rounded(values: Tensor, dtype: torch.dtype) -> Tensor:
    """float64 `values` rounded once to the nearest `dtype` value. torch converts float64 to fp16/bf16 through float32,
    which rounds twice (a value just above a midpoint can land on it, then go to even); rounding to float32 toward the
    odd neighbour first keeps what the second rounding needs (float32 has 13 more bits than fp16, 16 more than bf16)."""
    if dtype in (torch.float64, torch.float32) or not dtype.is_floating_point:
        return values.to(dtype)
    near = values.float()
    rest = values - near.double()
    even = (near.view(torch.int32) & 1) == 0
    toward = torch.where(rest > 0, torch.full_like(near, float("inf")), torch.full_like(near, float("-inf")))
    odd = torch.where((rest != 0) & even, torch.nextafter(near, toward), near)
    return odd.to(dtype)


def _weighted(module: nn.Module) -> bool:
    return isinstance(module, (nn.Linear, nn.Conv2d))


def encoder_component(index: int) -> str:
    return "text_encoder" + (f"_{index + 1}" if index else "")


def _encoder_prefix(name: str, count: int) -> tuple[int, str] | None:
    """(text encoder index, kohya prefix) of a kohya text-encoder module name."""
    for index in range(count):
        prefix = "lora_te_" if count == 1 else f"lora_te{index + 1}_"
        if name.startswith(prefix):
            return index, prefix
    return None


def layer_map(model: LoadedModel) -> dict[str, Target]:
    """Every layer with a weight (Linear, Conv2d) of the model under its kohya module name."""
    denoiser = model.family.denoiser_folder
    own = model.family.lora_targets(model.unet)
    encoder_paths = [{id(m): p for p, m in _classic(te).named_modules()} for te in model.text_encoders]
    unet_paths = {id(m): p for p, m in model.unet.named_modules()}
    targets: dict[str, Target] = {}
    for name, module in kohya_modules(model).items():
        if not _weighted(module):
            continue
        found = _encoder_prefix(name, len(model.text_encoders))
        if found is not None:
            index = found[0]
            targets[name] = Target(name, (module,), (encoder_paths[index][id(module)],), encoder_component(index),
                                   (None,))
        elif own is None:
            targets[name] = Target(name, (module,), (unet_paths[id(module)],), denoiser, (None,))
    for target in own or []:
        rows = target.rows or (None,) * len(target.layers)
        paths = tuple(unet_paths[id(layer)] for layer in target.layers)
        targets[target.name] = Target(target.name, target.layers, paths, denoiser, tuple(rows))
    return targets


def lora_module_names(model: LoadedModel, conv: bool) -> list[str]:
    """The modules a LoRA trained on `model` has (networks.lora's choice of layers; with `conv`, 3x3 convs too)."""
    from trainers.methods.lora.network import LoRANetwork

    targets = model.family.lora_targets(model.unet)
    dims = model.family.lora_target_dims(targets, {}, 1) if targets else None  # FLUX: no input layers by default
    network = LoRANetwork(model.unet, model.text_encoders, unet_key_style=model.family.unet_key_style, network_dim=1,
                          network_alpha=1.0, conv_dim=1 if conv else None, unet_targets=targets, target_dims=dims)
    return [name for name, _ in network.named_modules_for_kohya()]


# ---- ComfyUI's names ------------------------------------------------------------------------------------------

def comfy_encoder_names(model: LoadedModel) -> list[str]:
    """ComfyUI's name of each text encoder (clip_l, clip_h, clip_g, t5xxl), from the family's parts."""
    parts = [p for p in model.family.checkpoint_parts if getattr(p, "kind", "") != "vae"]
    if parts:
        return ["t5xxl" if p.kind == "t5" else p.kind for p in parts]
    openclip = [p.prefix.endswith(".model.") for p in model.family.single_file_text_encoders]
    return ["clip_g" if is_open and len(openclip) > 1 else "clip_h" if is_open else "clip_l" for is_open in openclip]


def comfy_names(model: LoadedModel, targets: dict[str, Target]) -> dict[str, str]:
    """kohya module name -> ComfyUI's generic name (the layer's path in the original checkpoint layout)."""
    encoders = comfy_encoder_names(model)
    reference = _reference_paths(model) if model.family.own_checkpoint_layout else {}
    out = {}
    for name, target in targets.items():
        found = _encoder_prefix(name, len(model.text_encoders))
        if found is not None:
            out[name] = f"{COMFY_TEXT}{encoders[found[0]]}.transformer.{target.paths[0]}"
        elif name in reference:
            out[name] = COMFY_UNET + reference[name]
        elif not reference:
            try:
                out[name] = COMFY_UNET + unet_to_ldm_key(target.paths[0] + ".weight", model.unet.config
                                                         ).removesuffix(".weight")
            except ConversionError:
                continue
    return out


def _reference_paths(model: LoadedModel) -> dict[str, str]:
    """kohya name -> the layer's path in a family's own reference layout (SD3's, FLUX's), whose module names kohya's
    are with dots as underscores. Call it on a skeleton: the layout is computed on meta tensors."""
    keys = model.family.to_checkpoint(model, model.unet.state_dict())
    modules = {k.removesuffix(".weight").split("diffusion_model.", 1)[-1] for k in keys
               if k.endswith(".weight") and "first_stage_model." not in k}
    return {"lora_unet_" + m.replace(".", "_"): m for m in modules}


# ---- models with weights, or only their modules ------------------------------------------------------------

def load_weights(path: str, option: str, files: ModelFiles, dtype: torch.dtype | None = None) -> LoadedModel:
    """A whole model on the CPU, in `dtype` (None: as it is stored, so it takes the memory its files do); SD3 and FLUX
    single files with their part files."""
    from trainers.models import ModelLoadError

    try:
        return load_model(path, "auto", dtype or stored_dtype(Path(path).expanduser()), files=files)
    except ModelLoadError as err:
        raise ToolError(option, str(err)) from None


def skeleton(path: str, option: str, files: ModelFiles) -> LoadedModel:
    """The model's modules without weights (meta tensors): a diffusers folder's configs, or for a single file its
    family's published architecture (SD3 and FLUX files, which carry their own, are loaded with weights)."""
    folder = Path(path).expanduser()
    if folder.is_file() and folder.suffix.lower() in SINGLE_FILE_SUFFIXES:
        try:
            rules = checkpoint_rules(open_checkpoint(folder).shapes, str(folder))
        except Exception as err:  # noqa: BLE001 - a ModelLoadError or a damaged file: named either way
            raise ToolError(option, str(err)) from None
        if rules is None or rules.own_checkpoint_layout or not (rules.arch_dir / "model_index.json").exists():
            return load_weights(path, option, files, torch.float16)
        return _skeleton_of(rules.arch_dir, family_named(rules.name), str(folder))
    if not (folder / "model_index.json").exists():
        raise ToolError(option, f"{folder} is no diffusers model folder (no model_index.json) nor a single file")
    try:
        rules = folder_rules(folder)
    except Exception as err:  # noqa: BLE001
        raise ToolError(option, str(err)) from None
    return _skeleton_of(folder, family_named(rules.name), str(folder))


def _component(entry: object) -> bool:
    """A model_index.json entry naming a component ([library, class]; Krea 2's text_encoder_select_layers is none)."""
    return isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry)


def _skeleton_of(folder: Path, family: object, source: str) -> LoadedModel:
    import diffusers
    import transformers
    from accelerate import init_empty_weights

    index = read_json(folder / "model_index.json")
    denoiser_folder = getattr(family, "denoiser_folder")

    def build(sub: str) -> nn.Module:
        library, cls_name = index[sub][:2]
        cls = getattr(diffusers if library == "diffusers" else transformers, cls_name)
        if hasattr(cls, "load_config"):
            return cls.from_config(cls.load_config(folder / sub))
        return cls(cls.config_class.from_pretrained(folder / sub))

    encoders = sorted((k for k in index if k.startswith("text_encoder") and _component(index[k])), key=_encoder_order)
    with init_empty_weights():
        unet = build(denoiser_folder)
        text_encoders = [build(sub) for sub in encoders]
        vae = build("vae") if "vae" in index and index["vae"][0] else None
    variant = getattr(family, "checkpoint_variant", None)  # SD3's medium / large, FLUX.1's dev / schnell
    family = variant(unet.config) if variant is not None else family
    return LoadedModel(family, unet, vae, text_encoders, [], None, "", source)  # type: ignore[arg-type]


def stored_dtype(path: Path) -> torch.dtype:
    """The precision a model's weights are stored in (its denoiser's first floating tensor's; float32 when unknown,
    e.g. for a .ckpt)."""
    from safetensors import safe_open

    files = [path] if path.is_file() else sorted(path.glob("*/*.safetensors"),
                                                 key=lambda f: (f.parent.name not in ("unet", "transformer"), str(f)))
    names = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    for file in (f for f in files if f.suffix == ".safetensors"):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                found = names.get(handle.get_slice(key).get_dtype())
                if found is not None:
                    return found
    return torch.float32


def _encoder_order(name: str) -> int:
    return int(name.rpartition("_")[2]) if name[-1].isdigit() else 1
