"""Z-Image's transformer in the reference layout (Tongyi-MAI's NextDiT: `layers.N.attention.qkv`, `x_embedder`,
`final_layer`; ComfyUI's diffusion_models file and musubi-tuner's --dit) and in diffusers' ZImageTransformer2DModel:
its rules (reference_layout.py), the inverse of diffusers' convert_z_image_transformer_checkpoint_to_diffusers. The
config comes from the tensor shapes, and what they do not hold (rope, norms) from the published one (transformer.json).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.models import nextdit
from trainers.models import reference_layout as layout
from trainers.models.reference_layout import Rule, linear

MARKER = "context_refiner."  # NextDiT's caption refiner: where the file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")  # ComfyUI's nesting of the transformer
BASE_CONFIG = Path(__file__).with_name("transformer.json")  # Tongyi-MAI/Z-Image-Turbo's transformer config
PATCH = "2-1"  # diffusers' key of the one patch size (2x2, one frame) the reference layout has
UNUSED = "norm_final.weight"  # the reference's final norm, which its forward never reads (diffusers drops it)


def rules(blocks: Mapping[str, int]) -> list[Rule]:
    """`blocks`: how many of each kind (noise_refiner, context_refiner, layers) the transformer has."""
    out: list[Rule] = [*linear("x_embedder", f"all_x_embedder.{PATCH}"),
                       *linear("final_layer.linear", f"all_final_layer.{PATCH}.linear"),
                       *linear("final_layer.adaLN_modulation.1", f"all_final_layer.{PATCH}.adaLN_modulation.1"),
                       *linear("t_embedder.mlp.0", "t_embedder.mlp.0"), *linear("t_embedder.mlp.2", "t_embedder.mlp.2"),
                       Rule("cap_embedder.0.weight", ("cap_embedder.0.weight",)),
                       *linear("cap_embedder.1", "cap_embedder.1"),
                       Rule("x_pad_token", ("x_pad_token",)), Rule("cap_pad_token", ("cap_pad_token",))]
    for kind, number in blocks.items():
        for i in range(number):
            block = f"{kind}.{i}."
            out.append(Rule(f"{block}attention.qkv.weight", tuple(f"{block}attention.to_{p}.weight" for p in "qkv")))
            renamed = [("attention.out", "attention.to_out.0"), ("attention.q_norm", "attention.norm_q"),
                       ("attention.k_norm", "attention.norm_k")]
            kept = ("attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2", "feed_forward.w1",
                    "feed_forward.w2", "feed_forward.w3")
            out += [Rule(f"{block}{ref}.weight", (f"{block}{ours}.weight",))
                    for ref, ours in [*renamed, *((name, name) for name in kept)]]
            if kind != "context_refiner":  # the caption refiner is not modulated
                out += linear(f"{block}adaLN_modulation.0", f"{block}adaLN_modulation.0")
    return out


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """ZImageTransformer2DModel's config of a reference-layout transformer: its sizes from the tensor shapes, the
    rest as published."""
    found = nextdit.sizes(shapes, name, "Z-Image")
    config = {"dim": found.width, "in_channels": found.patch_inputs // 4, "n_layers": found.layers,
              "n_refiner_layers": found.refiners, "n_heads": found.heads, "n_kv_heads": found.kv_heads,
              "cap_feat_dim": found.caption_width}
    return nextdit.published(BASE_CONFIG, config, found.head, "dim", "n_heads", "axes_dims")


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    layers = {"noise_refiner": config["n_refiner_layers"], "context_refiner": config["n_refiner_layers"],
              "layers": config["n_layers"]}
    return rules(layers)


LAYOUT = layout.Layout(PREFIXES, MARKER, _rules_of, lambda config: config["dim"], unused=(UNUSED,))
strip_prefix, to_diffusers, to_reference = LAYOUT.strip_prefix, LAYOUT.to_diffusers, LAYOUT.to_reference
