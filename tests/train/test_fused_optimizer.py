"""fused_optimizer: AdamW/Adam run in torch's fused kernel where torch has one for the weights' device and dtype
('auto'), always ('on', refused by name where it cannot), or never ('off'); a fused step equals the plain one."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from trainers.core.errors import ConfigError
from trainers.core.options import TrainConfig
from trainers.train.optim import build_optimizer, fused_devices, kernel_choice

def _groups(*tensors: torch.Tensor) -> list[dict[str, Any]]:
    return [{"params": [torch.nn.Parameter(t) for t in tensors]}]

def test_the_choice_is_made_per_device_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = _groups(torch.zeros(4), torch.zeros(3, dtype=torch.bfloat16))
    assert "cpu" in fused_devices()  # torch 2.13 has fused Adam/AdamW kernels on the CPU
    assert kernel_choice(torch.optim.AdamW, cpu, "auto") == {"fused": True}
    assert kernel_choice(torch.optim.Adam, cpu, "on") == {"fused": True}
    assert kernel_choice(torch.optim.AdamW, cpu, "off") == {"fused": False}
    assert kernel_choice(torch.optim.SGD, cpu, "auto") == {}
    # a device torch has no fused kernel for: auto leaves torch's default (foreach where torch picks it)
    meta = [{"params": [torch.nn.Parameter(torch.zeros(2, device="meta"))]}]
    assert kernel_choice(torch.optim.AdamW, meta, "auto") == {}
    with pytest.raises(ConfigError) as err:
        kernel_choice(torch.optim.AdamW, meta, "on")
    assert err.value.issues[0].field == "fused_optimizer" and "meta" in err.value.issues[0].message
    with pytest.raises(ConfigError) as err:
        kernel_choice(torch.optim.SGD, cpu, "on")
    assert err.value.issues[0].field == "fused_optimizer" and "SGD" in err.value.issues[0].message
    # an older torch without the CPU kernels: CPU weights are not fused, CUDA's would be
    monkeypatch.setattr("trainers.train.optim.fused_devices", lambda: {"cuda"})
    assert kernel_choice(torch.optim.AdamW, cpu, "auto") == {}

def _run(values: dict[str, Any], steps: int = 3) -> tuple[torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(32, 32)
    before = layer.weight.detach().clone()
    cfg = TrainConfig("lora", {"optimizer_type": "AdamW", "learning_rate": 1e-2, **values})
    opt = build_optimizer(cfg, [{"params": list(layer.parameters())}], warn=lambda m: None)
    for _ in range(steps):
        layer(torch.randn(8, 32)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return opt, before, layer.weight.detach()

def test_a_fused_step_equals_the_plain_step_on_the_cpu() -> None:
    fused, before, after = _run({})
    plain, _, reference = _run({"fused_optimizer": "off"})
    assert fused.param_groups[0]["fused"] is True and plain.param_groups[0]["fused"] is False
    assert not plain.param_groups[0]["foreach"]  # torch's CPU default: the per-tensor loop
    assert (after - before).abs().max() > 1e-3 and torch.allclose(after, reference, atol=1e-6)
    kept, _, _ = _run({"fused_optimizer": "on", "optimizer_args": ["fused=False"]}, steps=1)
    assert kept.param_groups[0]["fused"] is False  # optimizer_args win over the option
