"""Z-Image LoRAs Atelier trains (ComfyUI's fused attention_qkv) written in musubi-tuner's names: q, k and v as the
three rank-r modules its lora_zimage trains, each computing its rows of what the fused module computed, and read back
as the same fused update."""
from __future__ import annotations

import pytest
import torch

from trainers.models.zimage.lora_names import comfy_names, musubi_names

RANK, ALPHA, WIDTH = 4, 2.0, 8


def _update(state: dict[str, torch.Tensor], module: str) -> torch.Tensor:
    down, up = state[f"{module}.lora_down.weight"], state[f"{module}.lora_up.weight"]
    return up @ down * float(state[f"{module}.alpha"]) / down.shape[0]


def _fused() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    state = {}
    for module, rows in (("lora_unet_layers_0_attention_qkv", 3 * WIDTH), ("lora_unet_layers_0_attention_out", WIDTH),
                         ("lora_unet_layers_0_feed_forward_w1", 2 * WIDTH)):
        state[f"{module}.lora_down.weight"] = torch.randn(RANK, WIDTH, generator=generator)
        state[f"{module}.lora_up.weight"] = torch.randn(rows, RANK, generator=generator)
        state[f"{module}.alpha"] = torch.tensor(ALPHA)
    return state


def test_musubis_split_modules_compute_the_fused_update_and_read_back_as_it() -> None:
    fused = _fused()
    musubi = musubi_names(fused)
    stem = "lora_unet_layers_0_attention_"
    assert {k.partition(".")[0] for k in musubi} == {stem + "to_q", stem + "to_k", stem + "to_v",
                                                      stem + "to_out_0", "lora_unet_layers_0_feed_forward_w1"}
    whole = _update(fused, stem + "qkv")
    for index, name in enumerate(("to_q", "to_k", "to_v")):
        assert musubi[f"{stem}{name}.lora_down.weight"].shape == (RANK, WIDTH)  # musubi's rank, not a third of it
        assert torch.allclose(_update(musubi, stem + name), whole[index * WIDTH:(index + 1) * WIDTH], atol=1e-6)
    assert torch.equal(musubi[f"{stem}to_out_0.lora_up.weight"], fused[f"{stem}out.lora_up.weight"])
    back = comfy_names(musubi)
    assert set(back) == set(fused)
    modules = {k.partition(".")[0] for k in fused}
    assert all(torch.allclose(_update(back, m), _update(fused, m), atol=1e-5) for m in modules)


def test_a_fused_module_of_another_kind_is_refused_by_name() -> None:
    state = {"lora_unet_layers_0_attention_qkv.hada_w1_a": torch.zeros(3, 2)}
    with pytest.raises(ValueError, match="lora_unet_layers_0_attention_qkv.hada_w1_a"):
        musubi_names(state)
