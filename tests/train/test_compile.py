"""compile_blocks: the denoiser's repeated blocks are compiled one by one (diffusers' regional compilation) where
it is on, a training step computes what the uncompiled model computes, and Validate refuses it by name where it
cannot run (with dynamo_backend, block swap, layer offload)."""
from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from trainers.core.options import TrainConfig
from trainers.core.options.validation import compile_issues
from trainers.models.families import family
from trainers.train.compile import compile_blocks, compile_wanted, is_compiled


def test_auto_compiles_nowhere_until_a_gpu_check_shows_it_faster() -> None:
    assert not compile_wanted({}, "cuda") and not compile_wanted({}, "cpu")
    assert compile_wanted({"compile_blocks": "on"}, "cuda")


def test_auto_on_cuda_compiles_only_where_it_can(monkeypatch) -> None:
    import trainers.train.compile as compile_module

    monkeypatch.setattr(compile_module, "AUTO_ON_CUDA", True)
    assert compile_wanted({}, "cuda") and not compile_wanted({}, "cpu")
    assert compile_wanted({"compile_blocks": "on"}, "cpu") and not compile_wanted({"compile_blocks": "off"}, "cuda")
    for values in ({"blocks_to_swap": 4}, {"layer_offload_fraction": 0.5}, {"fp8_base": True},
                   {"base_model_precision": "nf4"}, {"distributed_backend": "fsdp"}, {"dynamo_backend": "inductor"}):
        assert not compile_wanted({"compile_blocks": "auto", **values}, "cuda"), values
    assert compile_wanted({"base_model_precision": "int8"}, "cuda")


def test_validate_refuses_on_where_it_cannot_run() -> None:
    def fields(values: dict[str, Any]) -> list[str]:
        return [issue.field for issue in compile_issues(TrainConfig("lora", values))]

    assert fields({"compile_blocks": "on"}) == []
    assert fields({"compile_blocks": "on", "dynamo_backend": "inductor"}) == ["compile_blocks"]
    assert fields({"compile_blocks": "on", "blocks_to_swap": 2, "gradient_checkpointing": True}) == ["compile_blocks"]
    assert fields({"compile_blocks": "auto", "dynamo_backend": "inductor", "blocks_to_swap": 2}) == []


def _tiny_unet() -> nn.Module:
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    return UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                                attention_head_dim=8, norm_num_groups=8)


def _step(unet: nn.Module) -> tuple[float, torch.Tensor]:
    torch.manual_seed(1)
    noisy, hidden, target = torch.randn(2, 4, 8, 8), torch.randn(2, 5, 32), torch.randn(2, 4, 8, 8)
    loss = (unet(noisy, torch.tensor([10, 500]), hidden).sample - target).pow(2).mean()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in unet.parameters() if p.grad is not None])
    return loss.item(), grads


def _compiled_step(backend: str) -> None:
    torch._dynamo.reset()
    plain = _tiny_unet()
    compiled = copy.deepcopy(plain)
    sd1 = family("sd1")
    assert compile_blocks(sd1, compiled, {"compile_blocks": "auto"}, "cpu") == []  # auto: not on the CPU
    blocks = compile_blocks(sd1, compiled, {"compile_blocks": "on"}, "cpu", backend=backend)
    assert blocks and all(type(b).__name__ == "BasicTransformerBlock" and is_compiled(b) for b in blocks)
    assert not is_compiled(plain.down_blocks[0].attentions[0].transformer_blocks[0])
    loss, grads = _step(plain)
    compiled_loss, compiled_grads = _step(compiled)
    assert compiled_loss == pytest.approx(loss, rel=1e-5)
    assert torch.allclose(compiled_grads, grads, atol=1e-5, rtol=1e-4)


@pytest.mark.slow  # 40 s on a busy 2-core machine
def test_a_compiled_step_computes_the_plain_step() -> None:
    # dynamo's graphs and autograd through them, without inductor's C++ compile (171 s on the CPU: the compiled arm
    # of benchmarks/side_by_side.py --speed-arms runs inductor end to end)
    _compiled_step("aot_eager")


def test_families_without_diffusers_list_compile_their_block_lists() -> None:
    class Denoiser(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Linear(4, 4)
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

    denoiser = Denoiser()
    assert family("sd1").repeated_blocks(denoiser) == list(denoiser.blocks)
