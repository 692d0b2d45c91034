"""HunyuanImage 2.1's transformer in the reference layout (Tencent's dit/hunyuanimage2.1.safetensors, which ComfyUI's
diffusion_models/hunyuanimage2.1_bf16.safetensors and sd-scripts' --dit hold: `double_blocks.N.img_attn_qkv`,
`single_blocks.N.linear1`, `byt5_in.fc1`, `txt_in.individual_token_refiner.blocks.N.self_attn_qkv`) and in diffusers'
HunyuanImageTransformer2DModel: its rules (reference_layout.py), after diffusers' own conversion script
(scripts/convert_hunyuan_image_to_diffusers.py; diffusers 0.42.1 ships no single-file converter for it).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import Rule, linear

MARKER = "double_blocks."  # the first key of its blocks: where the file nests the denoiser
PREFIXES = ("model.diffusion_model.", "diffusion_model.")
ARCH = Path(__file__).with_name("arch") / "transformer.json"


def rules(config: Mapping[str, Any]) -> list[Rule]:
    out: list[Rule] = []
    out += linear("img_in.proj", "x_embedder.proj")
    for i in (1, 2, 3):
        out += linear(f"byt5_in.fc{i}", f"context_embedder_2.linear_{i}")
    out += linear("byt5_in.layernorm", "context_embedder_2.norm")
    out += linear("txt_in.input_embedder", "context_embedder.proj_in")
    text = "context_embedder.time_text_embed."
    out += linear("txt_in.t_embedder.mlp.0", f"{text}timestep_embedder.linear_1")
    out += linear("txt_in.t_embedder.mlp.2", f"{text}timestep_embedder.linear_2")
    out += linear("txt_in.c_embedder.linear_1", f"{text}text_embedder.linear_1")
    out += linear("txt_in.c_embedder.linear_2", f"{text}text_embedder.linear_2")
    for i in range(config["num_refiner_layers"]):
        ref = f"txt_in.individual_token_refiner.blocks.{i}."
        ours = f"context_embedder.token_refiner.refiner_blocks.{i}."
        out += [*linear(f"{ref}norm1", f"{ours}norm1"), *linear(f"{ref}norm2", f"{ours}norm2")]
        out += linear(f"{ref}self_attn_qkv", *(f"{ours}attn.{p}" for p in ("to_q", "to_k", "to_v")))
        out += linear(f"{ref}self_attn_proj", f"{ours}attn.to_out.0")
        out += [*linear(f"{ref}mlp.fc1", f"{ours}ff.net.0.proj"), *linear(f"{ref}mlp.fc2", f"{ours}ff.net.2")]
        out += linear(f"{ref}adaLN_modulation.1", f"{ours}norm_out.linear")
    embedders = [("time_in", "timestep_embedder")]
    embedders += [("time_r_in", "timestep_embedder_r")] if config["use_meanflow"] else []
    embedders += [("guidance_in", "guidance_embedder")] if config["guidance_embeds"] else []
    for ref, ours in embedders:
        out += linear(f"{ref}.mlp.0", f"time_guidance_embed.{ours}.linear_1")
        out += linear(f"{ref}.mlp.2", f"time_guidance_embed.{ours}.linear_2")
    streams = (  # per stream: its modulation, q/k/v, output projection, MLP and q/k norms in diffusers
        ("img", "norm1", ("to_q", "to_k", "to_v"), "to_out.0", "ff", ("norm_q", "norm_k")),
        ("txt", "norm1_context", ("add_q_proj", "add_k_proj", "add_v_proj"), "to_add_out", "ff_context",
         ("norm_added_q", "norm_added_k")))
    for i in range(config["num_layers"]):
        ref, ours = f"double_blocks.{i}.", f"transformer_blocks.{i}."
        for stream, norm, qkv, proj, ff, qk_norms in streams:
            out += linear(f"{ref}{stream}_mod.linear", f"{ours}{norm}.linear")
            out += linear(f"{ref}{stream}_attn_qkv", *(f"{ours}attn.{p}" for p in qkv))
            out += linear(f"{ref}{stream}_attn_proj", f"{ours}attn.{proj}")
            out += linear(f"{ref}{stream}_mlp.fc1", f"{ours}{ff}.net.0.proj")
            out += linear(f"{ref}{stream}_mlp.fc2", f"{ours}{ff}.net.2")
            out += [Rule(f"{ref}{stream}_attn_{q}_norm.weight", (f"{ours}attn.{name}.weight",))
                    for q, name in zip("qk", qk_norms)]
    for i in range(config["num_single_layers"]):
        ref, ours = f"single_blocks.{i}.", f"single_transformer_blocks.{i}."
        out += linear(f"{ref}modulation.linear", f"{ours}norm.linear")
        out += linear(f"{ref}linear1", *(f"{ours}attn.{p}" for p in ("to_q", "to_k", "to_v")), f"{ours}proj_mlp")
        out += linear(f"{ref}linear2", f"{ours}proj_out")
        out += [Rule(f"{ref}{q}_norm.weight", (f"{ours}attn.norm_{q}.weight",)) for q in "qk"]
    out += linear("final_layer.linear", "proj_out")
    out += linear("final_layer.adaLN_modulation.1", "norm_out.linear", swap_halves=True)
    return out


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """HunyuanImageTransformer2DModel's config of a reference-layout file: the published one with the sizes its
    tensors tell (the rope axes split each head in two halves, as the published 64 + 64 of 128)."""
    config = {k: v for k, v in json.loads(ARCH.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    try:
        width, in_channels, *patch = shapes["img_in.proj.weight"]
        head = shapes["double_blocks.0.img_attn_q_norm.weight"][0]
        area = patch[0] * patch[1]
        config.update(
            in_channels=in_channels, out_channels=shapes["final_layer.linear.weight"][0] // area, patch_size=patch,
            attention_head_dim=head, num_attention_heads=width // head, rope_axes_dim=[head // 2, head // 2],
            num_layers=layout.count(shapes, "double_blocks."), num_single_layers=layout.count(shapes, "single_blocks."),
            num_refiner_layers=layout.count(shapes, "txt_in.individual_token_refiner.blocks."),
            mlp_ratio=shapes["double_blocks.0.img_mlp.fc1.weight"][0] / width,
            text_embed_dim=shapes["txt_in.input_embedder.weight"][1],
            text_embed_2_dim=shapes["byt5_in.fc1.weight"][1], guidance_embeds="guidance_in.mlp.0.weight" in shapes,
            use_meanflow="time_r_in.mlp.0.weight" in shapes)
    except KeyError as err:
        raise ModelLoadError(f"{name}: the HunyuanImage 2.1 transformer has no {err.args[0]}: is the file "
                             "complete?") from None
    return config


LAYOUT = layout.Layout(PREFIXES, MARKER, rules)
strip_prefix, to_diffusers, to_reference = LAYOUT.strip_prefix, LAYOUT.to_diffusers, LAYOUT.to_reference
