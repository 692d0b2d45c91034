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
from trainers.models.block_swap import offloaded_blocks, place_with_swap


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


class UNetLike(nn.Module):
    """down/mid/up blocks whose layers are checkpointed inside the block (as diffusers' UNet blocks) beside a layer
    that is not (a down/upsampler)."""

    def __init__(self) -> None:
        super().__init__()
        self.down_blocks = nn.ModuleList(Inner() for _ in range(2))
        self.mid_block = Inner()
        self.up_blocks = nn.ModuleList(Inner() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in (*self.down_blocks, self.mid_block, *self.up_blocks):
            x = block(x)
        return x


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.checkpointed = nn.Linear(8, 8)
        self.plain = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.plain(checkpoint(self.checkpointed, x, use_reentrant=False).tanh())


def _trained_weights(model: nn.Module, offloaded: list[nn.Module] | None, steps: int = 3,
                     accumulate: int = 2) -> dict[str, torch.Tensor]:
    """`model` trained `steps` AdamW steps of `accumulate` micro-batches each (clipped, as the loop does), cast to
    float64 after its blocks were placed (as full_bf16 casts a finetune's UNet)."""
    if offloaded:
        place_with_swap(model, offloaded, torch.device("cpu"))
    model.requires_grad_(True).double()  # a finetune turns training on (and casts) after the swap is placed
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for _ in range(accumulate):
            x = torch.randn(2, 8, generator=generator, dtype=torch.float64)
            model(x).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kind", [Blocks, UNetLike])
def test_a_finetune_with_offloaded_blocks_trains_the_same_weights_as_without(kind: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = kind().requires_grad_(False)
    reference = kind()
    reference.load_state_dict(model.state_dict())
    blocks = list(model.transformer_blocks)[2:] if kind is Blocks else [*model.up_blocks, model.mid_block]
    offloaded = _trained_weights(model, blocks)
    plain = _trained_weights(reference, None)
    first = next(iter(plain))
    assert not torch.equal(plain[first], kind().state_dict()[first])
    # the offloaded blocks' weights moved as the others' did: their gradients (summed over the micro-batches) came
    # back to the parameters for clipping and the optimizer
    assert all(torch.allclose(offloaded[k], plain[k], atol=1e-6) for k in plain), \
        max((offloaded[k] - plain[k]).abs().max().item() for k in plain)


def test_a_unet_counts_its_down_mid_and_up_blocks() -> None:
    model = UNetLike()
    assert offloaded_blocks({"layer_offload_fraction": 0.6}, model) == 3


def _finetuned(output: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    (path,) = output.glob("*.safetensors")
    return load_file(path)


def _same_training(plain: dict[str, torch.Tensor], offload: dict[str, torch.Tensor], before: dict[str, torch.Tensor],
                   ) -> None:
    """The offloaded run's weights are the plain run's (float tolerance), and training moved them."""
    assert plain.keys() == offload.keys()
    moved = max((plain[k].float() - before[k].float()).abs().max().item() for k in plain if k in before)
    worst = max((plain[k].float() - offload[k].float()).abs().max().item() for k in plain)
    assert moved > 1e-4 and worst < 1e-6, (moved, worst)


def _full_run(tmp_path: Path, model: Path, method: str, name: str, **values: object) -> Path:
    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    run = tmp_path / f"run-{name}"
    common = dict(pretrained_model_name_or_path=str(model), train_data_dir=str(data), resolution="64",
                  train_batch_size=1, max_data_loader_n_workers=0, max_train_steps=3, save_precision="float",
                  gradient_checkpointing=True)
    assert train(method, run, output_dir=str(tmp_path / name), **common, **values) == 0, \
        [e for e in events(run) if e["type"] == "error"]
    return tmp_path / name


@pytest.mark.slow
def test_a_flux_finetune_with_half_its_blocks_offloaded_trains_the_same_weights(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from trainers.models.flux.tiny import build_tiny_flux

    model = build_tiny_flux(tmp_path / "flux", blocks=(4, 8))
    flux = dict(learning_rate=1e-3, save_model_as="safetensors", t5xxl_max_token_length=32,
                model_prediction_type="raw")
    plain = _finetuned(_full_run(tmp_path, model, "finetune", "plain", **flux))
    offload = _finetuned(_full_run(tmp_path, model, "finetune", "offload", layer_offload_fraction=0.5, **flux))
    # the single file is in BFL's layout: its output layer is diffusers' proj_out
    before = {"final_layer.linear.weight":
              load_file(model / "transformer" / "diffusion_pytorch_model.safetensors")["proj_out.weight"]}
    _same_training(plain, offload, before)


@pytest.mark.slow
def test_a_unet_lora_and_finetune_with_blocks_offloaded_train_the_same_weights(tmp_path: Path,
                                                                               tiny_sd1_dir: Path) -> None:
    lora = dict(learning_rate=1e-2, network_dim=4, network_alpha=4)
    plain, _ = read_lora_file(_full_run(tmp_path, tiny_sd1_dir, "lora", "lora-plain", **lora) / "lora.safetensors")
    offload, _ = read_lora_file(_full_run(tmp_path, tiny_sd1_dir, "lora", "lora-offload", blocks_to_swap=2, **lora)
                                / "lora.safetensors")
    _same_training(plain, offload, {k: torch.zeros_like(v) for k, v in plain.items() if "lora_up" in k})
    full = dict(learning_rate=1e-3, save_model_as="diffusers")
    plain_dir = _full_run(tmp_path, tiny_sd1_dir, "finetune", "full-plain", **full)
    offload_dir = _full_run(tmp_path, tiny_sd1_dir, "finetune", "full-offload", layer_offload_fraction=0.5, **full)
    weights = "finetune/unet/diffusion_pytorch_model.safetensors"
    from safetensors.torch import load_file

    _same_training(load_file(plain_dir / weights), load_file(offload_dir / weights),
                   load_file(tiny_sd1_dir / "unet/diffusion_pytorch_model.safetensors"))


def test_a_finetune_and_a_unet_take_offload_and_are_told_it_needs_gradient_checkpointing() -> None:
    from trainers.core.options import TrainConfig
    from trainers.preflight.validate import validate

    for method, family in (("finetune", "sdxl"), ("dreambooth", "sd1"), ("lora", "sd1")):
        for option, value in (("layer_offload_fraction", 0.5), ("blocks_to_swap", 3)):
            found = [i for i in validate(TrainConfig(method, {"model_family": family, option: value}))
                     if i.field == option]
            assert len(found) == 1 and "gradient_checkpointing" in found[0].message, (method, option, found)
            assert not [i for i in validate(TrainConfig(method, {"model_family": family, option: value,
                                                                 "gradient_checkpointing": True}))
                        if i.field == option], (method, option)
