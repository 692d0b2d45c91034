"""Count the published sizes of the flow families' models for their rules' `memory_facts` (see
trainers/core/memory_facts.py).

    .venv/bin/python benchmarks/count_model_sizes.py            # every model below
    .venv/bin/python benchmarks/count_model_sizes.py flux2_klein_9b

Each model is built on the `meta` device (no weights, no download) from its published configs, written out below
with where they were read; the LoRA parameters per rank come from the family's own lora_targets, and the swap units
from what the family's swap_blocks counts. It prints each model's ModelSize arguments, to paste into its rules.py.

Activation figures are FLUX.1's (24.0 GB, 2.2 GB checkpointed, at 1024x1024), scaled by the hidden size times the
block-streams (a double-stream block counts twice): an estimate to calibrate with benchmarks/memory_benchmark.py.
Every model here has FLUX.1's 4096 image tokens at 1024x1024 (8x VAE with 2x2 patches, or 16x VAE without), but
HunyuanImage 2.1 at 2048x2048 (32x VAE).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS_DIR = Path(__file__).resolve().parents[1] / "trainers" / "models"
FLUX1_ACTIVATIONS = (24.0, 2.2)  # FLUX.1's memory_facts: GB per sample at 1024x1024, without/with checkpointing
FLUX1_STREAM_WIDTH = 3072 * (19 * 2 + 38)  # its hidden size times block-streams


@dataclass
class Published:
    family: str  # the family whose lora_targets and swap_blocks count it
    transformer: tuple[str, dict[str, Any]]  # diffusers class, its published config (its keys that differ)
    text_encoder: tuple[str, dict[str, Any]] | None  # transformers config class (or a json file here), its config
    vae: tuple[str, str | dict[str, Any]] | None  # diffusers class, its config; None: FLUX.1's ae (FLOW_AE)
    source: str
    variant: str = ""  # Flux2Pipeline or Flux2KleinPipeline for FLUX.2


# Published text encoder configs (config.json of each hub repo; the keys that set parameter counts).
QWEN3_8B = {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False}
QWEN25_VL_7B = {  # Qwen/Qwen2.5-VL-7B-Instruct (Qwen-Image's text_encoder folder)
    "text_config": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                    "tie_word_embeddings": False},
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                      "out_hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]},
    "vocab_size": 152064, "tie_word_embeddings": False}
QWEN3_VL = {  # Qwen/Qwen3-VL-8B-Instruct and -4B-Instruct
    "8b": {"text_config": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936},
           "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                             "out_hidden_size": 4096, "patch_size": 16, "deepstack_visual_indexes": [8, 16, 24],
                             "num_position_embeddings": 2304},
           "tie_word_embeddings": False},
    "4b": {"text_config": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936},
           "vision_config": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16,
                             "out_hidden_size": 2560, "patch_size": 16, "deepstack_visual_indexes": [5, 11, 17],
                             "num_position_embeddings": 2304},
           "tie_word_embeddings": True}}
MISTRAL_SMALL_31 = {  # mistralai/Mistral-Small-3.1-24B-Instruct-2503 (FLUX.2 dev's text_encoder folder)
    "text_config": {"hidden_size": 5120, "intermediate_size": 32768, "num_hidden_layers": 40,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072},
    "vision_config": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                      "num_attention_heads": 16, "image_size": 1540, "patch_size": 14},
    "spatial_merge_size": 2, "multimodal_projector_bias": False, "tie_word_embeddings": False}
MINISTRAL3_3B = {  # baidu/ERNIE-Image's text_encoder folder (Mistral3Model: Ministral 3 3B and its Pixtral tower)
    "text_config": {"model_type": "mistral", "hidden_size": 3072, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
                    "tie_word_embeddings": True},
    "vision_config": MISTRAL_SMALL_31["vision_config"],
    "image_token_index": 10, "spatial_merge_size": 2, "multimodal_projector_bias": False, "tie_word_embeddings": True}
FLUX2_KLEIN = {  # the transformer configs of FLUX.2-klein-4B and -9B (their diffusers folders)
    "4b": {"num_layers": 5, "num_single_layers": 20, "num_attention_heads": 24, "joint_attention_dim": 7680,
           "guidance_embeds": False},
    "9b": {"num_layers": 8, "num_single_layers": 24, "num_attention_heads": 32, "joint_attention_dim": 12288,
           "guidance_embeds": False}}

MODELS: dict[str, Published] = {
    # The calibration row, for the denoiser only (its text encoders, CLIP_L + T5XXL, are in memory_facts.py). It counts
    # 10_229_760 more than FluxRules' 11_891_178_560: dev's guidance embedder; and 4_825_408 LoRA parameters per rank
    # on FLUX.1's lora_targets, where FluxRules has 5_369_856 (counted another way before this script).
    "flux": Published(
        "flux", ("FluxTransformer2DModel", {"guidance_embeds": True}), None, None,
        "black-forest-labs/FLUX.1-dev"),
    "chroma": Published(
        "chroma", ("ChromaTransformer2DModel", {}), ("T5", {}), None,
        "lodestones/Chroma1-HD transformer config (= diffusers' ChromaTransformer2DModel defaults: 19 double, 38 "
        "single blocks, a 5-layer 5120-wide approximator; nunchaku-chroma and Forge's Chroma agree); T5-XXL; FLUX.1's "
        "ae"),
    "zimage": Published(
        "zimage", ("ZImageTransformer2DModel", "zimage/transformer.json"), ("Qwen3Model", "zimage/text_encoder.json"),
        None, "Tongyi-MAI/Z-Image-Turbo (transformer, Qwen3-4B text encoder; FLUX.1's ae)"),
    "lumina2": Published(
        "lumina2", ("Lumina2Transformer2DModel", "lumina2/transformer.json"),
        ("Gemma2Model", "lumina2/text_encoder.json"), None,
        "Alpha-VLLM/Lumina-Image-2.0 (NextDiT 2.6B, Gemma 2 2B text encoder; FLUX.1's ae)"),
    "qwen_image": Published(
        "qwen_image", ("QwenImageTransformer2DModel", {}), ("Qwen2_5_VLForConditionalGeneration", QWEN25_VL_7B),
        ("AutoencoderKLQwenImage", {}),
        "Qwen/Qwen-Image (transformer: 60 blocks, 24x128 heads, joint_attention_dim 3584 = diffusers' defaults; "
        "exo and the Swift port agree; Qwen2.5-VL-7B-Instruct; its VAE)"),
    "qwen_image21": Published(
        "qwen_image21", ("QwenImage21Transformer2DModel", {}), ("Qwen3VLForConditionalGeneration", QWEN3_VL["8b"]),
        ("AutoencoderKLQwenImage21", {}),
        "Qwen/Qwen-Image-2.1 as diffusers 0.42.1's class defaults give it (not cross-checked: no second published "
        "config found); its context_in_dim 4096 is Qwen3-VL-8B's width"),
    "hunyuan_image21": Published(
        "hunyuan_image21", ("HunyuanImageTransformer2DModel", "hunyuan_image21/arch/transformer.json"),
        ("Qwen2_5_VLForConditionalGeneration", QWEN25_VL_7B),
        ("AutoencoderKLHunyuanImage", "hunyuan_image21/arch/vae.json"),
        "hunyuanvideo-community/HunyuanImage-2.1-Diffusers (20 double, 40 single blocks, 28x128 heads; sd-scripts' "
        "library/hunyuan_image_models.py agrees; Qwen2.5-VL-7B-Instruct; its 32x VAE, sd-scripts' config). Its ByT5 "
        "glyph encoder (memory_facts' BYT5_GLYPH) is added in its rules.py; at 2048x2048 it has FLUX.1's 4096 "
        "image tokens"),
    "flux2_dev": Published(
        "flux2", ("Flux2Transformer2DModel", {}), ("Mistral3ForConditionalGeneration", MISTRAL_SMALL_31),
        ("AutoencoderKLFlux2", {}),
        "black-forest-labs/FLUX.2-dev (8 double, 48 single blocks, 48x128 heads = diffusers' defaults; mflux "
        "agrees; Mistral-Small-3.1-24B text encoder; AutoencoderKLFlux2)", "Flux2Pipeline"),
    "flux2_klein_4b": Published(
        "flux2", ("Flux2Transformer2DModel", FLUX2_KLEIN["4b"]), ("Qwen3ForCausalLM", "zimage/text_encoder.json"),
        ("AutoencoderKLFlux2", {}),
        "black-forest-labs/FLUX.2-klein-4B (5 double, 20 single blocks, 24x128 heads: diffusers' conversion "
        "script, InvokeAI and mflux agree; Qwen3-4B; AutoencoderKLFlux2)", "Flux2KleinPipeline"),
    "flux2_klein_9b": Published(
        "flux2", ("Flux2Transformer2DModel", FLUX2_KLEIN["9b"]), ("Qwen3ForCausalLM", QWEN3_8B),
        ("AutoencoderKLFlux2", {}),
        "black-forest-labs/FLUX.2-klein-9B (8 double, 24 single blocks, 32x128 heads: diffusers' conversion "
        "script, InvokeAI and mflux agree; Qwen3-8B; AutoencoderKLFlux2)", "Flux2KleinPipeline"),
    "krea2": Published(
        "krea2", ("Krea2Transformer2DModel", {}), ("Qwen3VLModel", QWEN3_VL["4b"]), ("AutoencoderKLQwenImage", {}),
        "Krea 2 as diffusers 0.42.1's class defaults give it (no published diffusers folder: not cross-checked); its "
        "text_hidden_dim 2560 is Qwen3-VL-4B's width; Qwen-Image's VAE"),
    "ernie_image": Published(
        "ernie_image", ("ErnieImageTransformer2DModel", "ernie_image/arch/transformer.json"),
        ("Mistral3Model", MINISTRAL3_3B), ("AutoencoderKLFlux2", {}),
        "baidu/ERNIE-Image (36 single-stream layers, 32x128 heads, text_in_dim 3072; ComfyUI's comfy/ldm/ernie "
        "defaults agree; Ministral 3 3B with its Pixtral tower; FLUX.2's AutoencoderKLFlux2)"),
}


def _config(spec: str | dict[str, Any]) -> dict[str, Any]:
    import json

    if isinstance(spec, str):
        return {k: v for k, v in json.loads((MODELS_DIR / spec).read_text()).items() if not k.startswith("_")}
    return dict(spec)


def _linear(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def text_encoder(cls_name: str, config: str | dict[str, Any]) -> nn.Module:
    import transformers

    cls = getattr(transformers, cls_name)
    values = _config(config)
    return cls(cls.config_class(**values))


def swap_units(family: Any, denoiser: nn.Module) -> int:
    """What blocks_to_swap counts: with single blocks beside double ones (FLUX.1, Chroma, FLUX.2), the double blocks
    and half the single ones (sd-scripts' count, block_swap.swap_units); else the one list swap_blocks takes from."""
    from trainers.models.block_swap import swap_units as paired_units

    if hasattr(denoiser, "single_transformer_blocks"):
        return paired_units(denoiser)
    count = 0
    while True:
        try:
            family.swap_blocks(denoiser, count + 1)
        except ValueError:
            return count + 2  # swap_blocks keeps two on the device
        count += 1


def count(name: str) -> dict[str, Any]:
    import diffusers

    from trainers.core.memory_facts import T5XXL, T5XXL_LINEAR, FLOW_AE
    from trainers.models.families import family as family_named

    spec = MODELS[name]
    family = family_named(spec.family)
    if spec.variant:
        family = family.variant(spec.variant, True)
    with torch.device("meta"):
        transformer = getattr(diffusers, spec.transformer[0])(**_config(spec.transformer[1]))
        if spec.text_encoder is None:
            texts, texts_linear = 0, 0
        elif spec.text_encoder[0] == "T5":
            texts, texts_linear = T5XXL, T5XXL_LINEAR
        else:
            encoder = text_encoder(*spec.text_encoder)
            texts, texts_linear = _params(encoder), _linear(encoder)
        vae = _params(getattr(diffusers, spec.vae[0])(**_config(spec.vae[1]))) if spec.vae else FLOW_AE
    targets = family.lora_targets(transformer)
    lora = sum(t.layers[0].in_features + sum(layer.out_features for layer in t.layers) for t in targets)
    units = swap_units(family, transformer)
    width = _stream_width(transformer)
    scale = width / FLUX1_STREAM_WIDTH
    return {"denoiser": _params(transformer), "denoiser_linear": _linear(transformer), "text_encoders": texts,
            "text_encoders_linear": texts_linear, "vae": vae, "lora_per_rank": lora, "text_lora_per_rank": 0,
            "swap_units": units, "source": spec.source, "activations_gb": round(FLUX1_ACTIVATIONS[0] * scale, 1),
            "activations_checkpointed_gb": round(FLUX1_ACTIVATIONS[1] * scale, 1)}


def _stream_width(transformer: nn.Module) -> int:
    """The hidden size times the block-streams: a block with separate text and image MLPs (FLUX's double blocks,
    Qwen-Image's) counts twice; NextDiT's layers, single blocks and Krea 2's shared blocks once."""
    total = 0
    for name in ("transformer_blocks", "single_transformer_blocks", "layers"):
        for block in getattr(transformer, name, ()):
            children = dict(block.named_children())
            streams = 2 if any(k.startswith(("txt_", "ff_context")) for k in children) else 1
            width = max(m.in_features for m in block.modules() if isinstance(m, nn.Linear))
            total += streams * _hidden(block, width)
    return total


def _hidden(block: nn.Module, fallback: int) -> int:
    """A block's hidden size: its attention's query projection's input width."""
    for sub_name, sub in block.named_modules():
        if sub_name.endswith(("to_q", "to_qkv", "qkv", "to_qkv_mlp_proj")) and isinstance(sub, nn.Linear):
            return sub.in_features
    return fallback


def main(names: list[str]) -> None:
    for name in names or list(MODELS):
        print(f"{name}: ModelSize(" + ", ".join(f"{k}={v:_}" if isinstance(v, int) else f"{k}={v!r}"
                                                for k, v in count(name).items()) + ")")


if __name__ == "__main__":
    main(sys.argv[1:])
