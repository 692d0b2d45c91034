"""Layer offload (layer_offload_fraction, blocks_to_swap): blocks' weights wait in CPU memory, each arrives one block
ahead of its turn in the forward pass and in the backward pass's recomputation, and training gives the same weights
as without offload."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import events, train
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.train.block_swap import offloaded_blocks, place_with_swap


class Blocks(nn.Module):
    """A denoiser-like stack: its blocks run under gradient checkpointing, as the options require."""

    def __init__(self, count: int = 4) -> None:
        super().__init__()
        self.transformer_blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.transformer_blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


def test_each_offloaded_block_arrives_ahead_of_its_turn_forward_and_backward() -> None:
    torch.manual_seed(0)
    model = Blocks().requires_grad_(False)
    reference = Blocks().requires_grad_(False)
    reference.load_state_dict(model.state_dict())
    swap = place_with_swap(model, list(model.transformer_blocks)[1:], torch.device("cpu"))
    x = torch.randn(2, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    model(x).square().sum().backward()
    reference(x_ref).square().sum().backward()
    assert torch.equal(x.grad, x_ref.grad)
    # 3 offloaded blocks: the first and the 2 after it come ahead in the forward pass, then the backward pass
    # recomputes the last one (its weights went back) and the 2 before it arrive ahead
    assert swap.fetched >= 4 and not swap.ahead


def test_a_fraction_counts_the_denoiser_blocks_as_blocks_to_swap_does() -> None:
    model = Blocks(10)
    assert offloaded_blocks({"layer_offload_fraction": 0.5}, model) == 5
    assert offloaded_blocks({"blocks_to_swap": 3}, model) == 3
    assert offloaded_blocks({}, model) == 0
    with pytest.raises(ValueError, match="blocks_to_swap instead"):  # a denoiser whose blocks it cannot count
        offloaded_blocks({"layer_offload_fraction": 0.5}, nn.Sequential(nn.Linear(8, 8)))


@pytest.mark.slow
def test_offload_trains_the_same_lora_as_without_it(tmp_path: Path) -> None:
    from trainers.models.flux.tiny import build_tiny_flux

    model = build_tiny_flux(tmp_path / "flux", blocks=(4, 8))  # 8 units: half is 2 double and 4 single blocks
    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    common = dict(pretrained_model_name_or_path=str(model), train_data_dir=str(data), resolution="64",
                  train_batch_size=1, max_data_loader_n_workers=0, learning_rate=1e-2, network_dim=4, network_alpha=4,
                  max_train_steps=3, save_precision="float", gradient_checkpointing=True, t5xxl_max_token_length=32,
                  model_prediction_type="raw")
    assert train("lora", tmp_path / "run-plain", output_dir=str(tmp_path / "plain"), **common) == 0
    run = tmp_path / "run-offload"
    assert train("lora", run, output_dir=str(tmp_path / "offload"), layer_offload_fraction=0.5, **common) == 0, \
        [e for e in events(run) if e["type"] == "error"]
    plain, _ = read_lora_file(tmp_path / "plain" / "lora.safetensors")
    offload, _ = read_lora_file(tmp_path / "offload" / "lora.safetensors")
    moved = max(t.abs().max().item() for k, t in plain.items() if k.endswith("lora_up.weight"))
    worst = max((plain[k] - offload[k]).abs().max().item() for k in plain)
    assert plain.keys() == offload.keys() and moved > 1e-3 and worst < 1e-6, worst
    # the 12 and 16 GB FLUX presets' combination: an int8 base whose offloaded blocks' weights are int8 tensors
    both = tmp_path / "run-int8-offload"
    assert train("lora", both, output_dir=str(tmp_path / "both"), layer_offload_fraction=0.5,
                 base_model_precision="int8", **common) == 0, [e for e in events(both) if e["type"] == "error"]
    losses = [[e["loss"] for e in events(run_dir) if e["type"] == "progress"] for run_dir in (run, both)]
    assert all(abs(a - b) <= 0.01 * b for a, b in zip(*losses)) and len(losses[1]) == 3, losses
