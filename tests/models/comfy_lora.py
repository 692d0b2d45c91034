"""What ComfyUI loads of a LoRA file, after its comfy/lora.py (Comfy-Org/ComfyUI): model_lora_keys_unet's names for
the keys of ComfyUI's model (the generic `lora_unet_<path>` and `diffusion_model.<path>` of every weight, and the
QwenImage branch's bare, `transformer.` and `lycoris_` names, where Qwen-Image 2.1's fused `img_mlp.gate_up` is
addressed by its `gate_layer` and `proj` halves), and load_lora's weight names (kohya's lora_up/lora_down, diffusers'
lora_B/lora_A, `.alpha`). ComfyUI's Krea2 and Lumina2 branches (diffusers' module names) are left out: what a file
needs them for is not what these tests save."""
from __future__ import annotations

from collections.abc import Mapping

import torch

PREFIX = "diffusion_model."
WEIGHTS = (("lora_up.weight", "lora_down.weight"), ("lora_B.weight", "lora_A.weight"),
           ("lora.up.weight", "lora.down.weight"), ("lora_linear_layer.up.weight", "lora_linear_layer.down.weight"))
Target = str | tuple[str, tuple[int, int, int]]  # a weight, or (weight, (dim, offset, size)): a slice of it


def unet_key_map(shapes: Mapping[str, torch.Size], qwen_image: bool = False) -> dict[str, Target]:
    """LoRA module name -> ComfyUI weight, for a model whose state dict has `shapes` (keys `diffusion_model.<path>`)."""
    key_map: dict[str, Target] = {}
    for key in shapes:
        if key.startswith(PREFIX) and key.endswith(".weight"):
            path = key[len(PREFIX):-len(".weight")]
            key_map[f"lora_unet_{path.replace('.', '_')}"] = key
            key_map[f"lora_prior_unet_{path.replace('.', '_')}"] = key
            key_map[key[:-len(".weight")]] = key
    if qwen_image:
        for key, shape in shapes.items():
            if not (key.startswith(PREFIX) and key.endswith(".weight")):
                continue
            path = key[len(PREFIX):-len(".weight")]
            targets: list[tuple[str, Target]] = [(path, key)]
            if path.endswith(".img_mlp.gate_up"):
                half = shape[0] // 2
                targets = [(path.replace(".gate_up", ".gate_layer"), (key, (0, 0, half))),
                           (path.replace(".gate_up", ".proj"), (key, (0, half, half)))]
            for name, target in targets:
                key_map[name] = key_map[f"transformer.{name}"] = target
                key_map[f"lycoris_{name.replace('.', '_')}"] = target
    return key_map


def load_lora(lora: Mapping[str, torch.Tensor], key_map: Mapping[str, Target]
              ) -> tuple[dict[Target, torch.Tensor], list[str]]:
    """(each patched weight's update, up @ down scaled by alpha / rank as ComfyUI applies it; the file's keys it
    warns "lora key not loaded" about)."""
    patches: dict[Target, torch.Tensor] = {}
    loaded: set[str] = set()
    for name, target in key_map.items():
        alpha = lora.get(f"{name}.alpha")
        if alpha is not None:
            loaded.add(f"{name}.alpha")
        for up_name, down_name in WEIGHTS:
            up, down = f"{name}.{up_name}", f"{name}.{down_name}"
            if up in lora:
                scale = float(alpha) / lora[down].shape[0] if alpha is not None else 1.0
                patches[target] = (lora[up].float() @ lora[down].float()) * scale
                loaded.update((up, down))
                break
    return patches, sorted(set(lora) - loaded)


def check_patches(patches: Mapping[Target, torch.Tensor], shapes: Mapping[str, torch.Size]) -> None:
    """Every update fits the weight (or slice) it patches: ComfyUI skips a mismatched one with a warning."""
    for target, update in patches.items():
        key, (dim, _, size) = (target, (0, 0, shapes[target][0])) if isinstance(target, str) else target
        expected = list(shapes[key])
        expected[dim] = size
        assert list(update.shape) == expected, (target, tuple(update.shape), expected)
