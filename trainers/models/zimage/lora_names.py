"""Z-Image LoRA files in musubi-tuner's names (its lora_zimage on diffusers' module names: `attention_to_q`, `_to_k`,
`_to_v` as three modules, `attention_to_out_0`) read as the ComfyUI names Atelier trains and writes
(`attention_qkv` as one module, `attention_out`), as musubi-tuner's convert_z_image_lora_to_comfy.py converts them:
the three downs stacked and the ups block-diagonal, so the fused module computes exactly what the three did; and
Atelier's files written in musubi's names (`tools convert --to musubi`), each of q, k and v with the fused module's
down and alpha and its rows of the up, exactly what the fused module computed. (musubi's `--reverse` cannot split a
trained fused module: it takes the down for three stacked ones.)
"""
from __future__ import annotations

import torch

SPLIT = ("to_q", "to_k", "to_v")
OUT_RENAME = ("_attention_to_out_0", "_attention_out")


def comfy_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` with musubi-tuner's split attention modules fused under ComfyUI's names; a file already in ComfyUI's
    names is returned as it is. Raises ValueError for an attention with some of q, k, v but not all three."""
    split = {key.partition(".")[0] for key in state if key.partition(".")[0].endswith(
        tuple(f"_attention_{name}" for name in SPLIT))}
    if not split and not any(key.partition(".")[0].endswith(OUT_RENAME[0]) for key in state):
        return state
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, tensor = key.partition(".")
        if module in split:
            continue
        if module.endswith(OUT_RENAME[0]):
            module = module.removesuffix(OUT_RENAME[0]) + OUT_RENAME[1]
        out[f"{module}.{tensor}"] = value
    for stem in sorted({module.rsplit("_to_", 1)[0] for module in split}):
        out.update(_fused(state, stem))
    return out


def _fused(state: dict[str, torch.Tensor], stem: str) -> dict[str, torch.Tensor]:
    """`<stem>_qkv` from `<stem>_to_q/_to_k/_to_v`: downs stacked, ups block-diagonal, the same alpha / rank."""
    names = [f"{stem}_{name}" for name in SPLIT]
    if missing := [n for n in names if f"{n}.lora_down.weight" not in state or f"{n}.lora_up.weight" not in state]:
        raise ValueError(f"{missing[0]} is missing: a musubi-tuner Z-Image LoRA has q, k and v of each attention")
    downs = [state[f"{n}.lora_down.weight"] for n in names]
    ups = [state[f"{n}.lora_up.weight"] for n in names]
    ranks = [down.shape[0] for down in downs]
    alphas = [float(state[f"{n}.alpha"]) if f"{n}.alpha" in state else float(rank) for n, rank in zip(names, ranks)]
    scales = [alpha / rank for alpha, rank in zip(alphas, ranks)]
    if len(set(scales)) > 1:  # one alpha cannot give three scales: each goes into its own up, the alpha is the rank
        ups = [(up.float() * scale).to(up.dtype) for up, scale in zip(ups, scales)]
        scales = [1.0]
    alpha_dtype = state[f"{names[0]}.alpha"].dtype if f"{names[0]}.alpha" in state else torch.float32
    return {f"{stem}_qkv.lora_down.weight": torch.cat(downs),
            f"{stem}_qkv.lora_up.weight": torch.block_diag(*ups),
            f"{stem}_qkv.alpha": torch.tensor(scales[0] * sum(ranks), dtype=alpha_dtype)}


def musubi_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` (ComfyUI's names, as Atelier writes) in musubi-tuner's: each attention_qkv as to_q, to_k and to_v (its
    down and alpha each, its up's rows in thirds: Z-Image's q, k and v are equally wide), attention_out as
    attention_to_out_0. Raises ValueError for a fused module that is not a plain LoRA (LoHa, LoKr)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module, _, tensor = key.partition(".")
        if not module.endswith("_attention_qkv"):
            module = module.removesuffix(OUT_RENAME[1]) + OUT_RENAME[0] if module.endswith(OUT_RENAME[1]) else module
            out[f"{module}.{tensor}"] = value
            continue
        if tensor not in ("lora_down.weight", "lora_up.weight", "alpha"):
            raise ValueError(f"{key}: only a plain LoRA's fused q, k, v can be split into musubi-tuner's modules")
        if tensor == "lora_up.weight" and value.shape[0] % 3:
            raise ValueError(f"{key}: {value.shape[0]} rows are not q, k and v of one width each")
        stem = module.removesuffix("qkv")
        parts = value.chunk(3) if tensor == "lora_up.weight" else (value,) * 3
        for name, part in zip(SPLIT, parts):
            out[f"{stem}{name}.{tensor}"] = part.clone()  # one tensor per key on disk
    return out
