"""LoRA files for the tools' tests: written from tensors (no model) or from a tiny model's network, and the tools
run in this process as the CLI runs them."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from trainers.loras.lora_state import LowRankModule, read_lora
from trainers.methods.lora.file_format import save_lora_file, with_hashes
from trainers.tools.job import run_tool
from trainers.tools.options import config_from_values

# kohya names of an SD1 LoRA (diffusers-style UNet names) with the weight shapes of a tiny model
LINEAR = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q"  # block IN01
CONV = "lora_unet_down_blocks_0_resnets_1_conv1"  # block IN02, a 3x3 conv (LoCon)
TEXT = "lora_te_text_model_encoder_layers_0_self_attn_q_proj"  # BASE
OUT = "lora_unet_up_blocks_1_attentions_0_proj_in"  # block OUT03, a 1x1 conv


def module(out: int, inner: tuple[int, ...], rank: int, alpha: float, seed: int) -> LowRankModule:
    generator = torch.Generator().manual_seed(seed)
    down = torch.randn(rank, *inner, generator=generator)
    up = torch.randn(out, rank, *([1, 1] if len(inner) == 3 else []), generator=generator) * 0.1
    return LowRankModule(down, up, alpha)


def sample_modules(rank: int = 4, alpha: float = 2.0, seed: int = 0) -> dict[str, LowRankModule]:
    return {LINEAR: module(32, (32,), rank, alpha, seed), CONV: module(32, (32, 3, 3), rank, alpha / 2, seed + 1),
            TEXT: module(32, (32,), rank, alpha, seed + 2), OUT: module(64, (64, 1, 1), rank, alpha, seed + 3)}


def write(path: Path, modules: dict[str, LowRankModule], metadata: dict[str, str] | None = None) -> Path:
    tensors = {k: v for name, m in modules.items() for k, v in m.tensors(name).items()}
    save_lora_file(path, tensors, with_hashes(tensors, {"ss_network_dim": "4", "ss_base_model_version": "sd_v1",
                                                        **(metadata or {})}))
    return path


def tiny_lora(model_dir: Path, path: Path, seed: int = 1, conv: bool = True, alphas: bool = False) -> Path:
    """A kohya LoRA (LoCon with `conv`) of a tiny model with random weights, as a trained one would be; with
    `alphas`, each module its own alpha."""
    from trainers.methods.lora.network import LoRANetwork
    from trainers.models import load_model

    model = load_model(str(model_dir), "auto", torch.float32)
    network = LoRANetwork(model.unet, model.text_encoders, unet_key_style=model.family.unet_key_style,
                          network_dim=4, network_alpha=2, conv_dim=2 if conv else None, conv_alpha=1,
                          unet_targets=model.family.lora_targets(model.unet))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, lora in network.named_modules_for_kohya():
            lora.lora_down.weight.copy_(torch.randn(lora.lora_down.weight.shape, generator=generator) * 0.3)
            lora.lora_up.weight.copy_(torch.randn(lora.lora_up.weight.shape, generator=generator) * 0.3)
            if alphas:
                lora.alpha.fill_(float(1 + len(name) % 3))
    tensors = network.kohya_state_dict(torch.float32)
    metadata = {**model.family.lora_metadata(False), "ss_network_module": "networks.lora", "ss_network_dim": "4"}
    save_lora_file(path, tensors, with_hashes(tensors, {k: str(v) for k, v in metadata.items()}))
    return path


def outputs(model_dir: Path, lora: Path, way: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(text encoder, UNet) outputs of a tiny SD1 pipeline with the LoRA: loaded by diffusers' load_lora_weights
    (`way` = "diffusers"), or each module's up @ down x its own alpha / rank added to its layer ("exact")."""
    from diffusers import StableDiffusionPipeline

    from trainers.models import LoadedModel
    from trainers.loras.layers import layer_map

    pipe = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None)
    if way == "diffusers":
        pipe.load_lora_weights(str(lora.parent), weight_name=lora.name)
    else:
        from trainers.models.loading import detect_family

        model = LoadedModel(detect_family(model_dir), pipe.unet, pipe.vae, [pipe.text_encoder], [], None, "", "")
        targets = layer_map(model)
        for name, module in read_lora(lora, "lora").plain("lora").items():
            targets[name].add(module.delta())
    ids = pipe.tokenizer(["a red fox"], padding="max_length", max_length=77, return_tensors="pt").input_ids
    generator = torch.Generator().manual_seed(0)
    latents, hidden = torch.randn(1, 4, 32, 32, generator=generator), torch.randn(1, 77, 32, generator=generator)
    with torch.no_grad():
        return pipe.text_encoder(ids)[0], pipe.unet(latents, 10, hidden).sample


def run(verb: str, folder: Path | None = None, **values: Any) -> Path:
    """A tool run in this process (no interpreter start-up), its job folder `folder`."""
    return run_tool(config_from_values(verb, values), folder)[0]


def deltas(path: Path) -> dict[str, torch.Tensor]:
    return {name: m.delta() for name, m in read_lora(path, "lora").plain("lora").items()}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
