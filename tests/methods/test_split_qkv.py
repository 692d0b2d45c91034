"""sd-scripts' split_qkv (networks.lora_flux / lora_sd3): each of q, k and v (FLUX's single blocks: and the MLP
input) trains its own LoRA, and the file holds them as one fused kohya module that loads at the trained strength."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from trainers.core.errors import ConfigError
from trainers.core.options import config_from_dict
from trainers.methods.lora.network import FusedLoRAModule, SplitLoRAModule, _kohya_tensors
from trainers.methods.lora.settings import network_settings
from trainers.models.base import LoraTarget


class Qkv(nn.Module):
    """Three layers that read the same input, as diffusers splits a fused qkv projection."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 6), nn.Linear(8, 6), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.q(x), self.k(x), self.v(x)


def _split(rank: int = 2, alpha: float = 1.0) -> tuple[Qkv, SplitLoRAModule]:
    torch.manual_seed(0)
    layers = Qkv()
    lora = SplitLoRAModule(LoraTarget("lora_unet_x_attn_qkv", (layers.q, layers.k, layers.v)), rank, alpha)
    with torch.no_grad():
        lora.lora_up.weight.normal_()  # every block trained, the blocks off the diagonal too (they must not count)
    lora.apply_to()
    return layers, lora


def test_each_layer_trains_its_own_lora_at_alpha_over_rank() -> None:
    layers, lora = _split(rank=2, alpha=1.0)
    x = torch.randn(3, 8)
    outs = layers(x)
    down, up = lora.lora_down.weight, lora.lora_up.weight
    rows = [slice(0, 6), slice(6, 12), slice(12, 16)]
    for i, (layer, out) in enumerate(zip((layers.q, layers.k, layers.v), outs)):
        own = up[rows[i], 2 * i:2 * i + 2] @ down[2 * i:2 * i + 2]  # this layer's rank-2 LoRA alone
        expected = torch.nn.functional.linear(x, layer.weight + own * (1.0 / 2), layer.bias)
        assert torch.allclose(out, expected, atol=1e-5), i
    sum(o.sum() for o in outs).backward()
    grad = lora.lora_up.weight.grad
    assert grad[0:6, 2:].abs().max() == 0 and grad[6:12, :2].abs().max() == 0  # off the diagonal: no part
    assert grad[0:6, :2].abs().max() > 0


def test_the_file_is_one_fused_module_that_any_tool_loads_at_the_trained_strength() -> None:
    layers, lora = _split(rank=2, alpha=1.0)
    x = torch.randn(3, 8)
    trained = [o.detach() for o in layers(x)]
    state = {k: v.detach().clone() for k, v in _kohya_tensors("lora_unet_x_attn_qkv", lora).items()}
    down, up, alpha = (state[f"lora_unet_x_attn_qkv.{k}"] for k in ("lora_down.weight", "lora_up.weight", "alpha"))
    assert down.shape == (6, 8) and up.shape == (16, 6) and float(alpha) == 3.0  # rank 3 x 2, alpha 3 x 1
    assert up[0:6, 2:].abs().max() == 0 and up[12:16, :4].abs().max() == 0  # block-diagonal
    # What ComfyUI, Forge and sd-scripts do with a kohya module: W + up @ down * alpha / rank.
    for i, layer in enumerate((layers.q, layers.k, layers.v)):
        rows = slice((0, 6, 12)[i], (6, 12, 16)[i])
        delta = up[rows] @ down * (float(alpha) / down.shape[0])
        assert torch.allclose(torch.nn.functional.linear(x, layer.weight + delta, layer.bias), trained[i], atol=1e-5)
    # and a fused module of the file's rank and alpha (Atelier without split_qkv, e.g. resuming or generating)
    fresh = Qkv()
    fresh.load_state_dict(layers.state_dict())
    fused = FusedLoRAModule(LoraTarget("lora_unet_x_attn_qkv", (fresh.q, fresh.k, fresh.v)), 6, float(alpha))
    with torch.no_grad():
        fused.lora_down.weight.copy_(down)
        fused.lora_up.weight.copy_(up)
    fused.apply_to()
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(fresh(x), trained))


def test_split_qkv_reads_as_sd_scripts_writes_it() -> None:
    base = {"pretrained_model_name_or_path": "m", "train_data_dir": "d"}
    assert network_settings(config_from_dict("lora", {**base, "network_args": ["split_qkv=True"]})).split_qkv
    assert not network_settings(config_from_dict("lora", {**base, "network_args": ["split_qkv=False"]})).split_qkv
    assert not network_settings(config_from_dict("lora", base)).split_qkv
    with pytest.raises(ConfigError, match="split_qkv='yes'"):
        network_settings(config_from_dict("lora", {**base, "network_args": ["split_qkv=yes"]}))
