"""fp8 storage trains through its layers: the input's gradient through a frozen fp8 layer is the gradient through
the same layer with its weight cast to the compute dtype (diffusers' layerwise casting raised a dtype error in the
backward), for each layer kind and padding a model has."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from trainers.quant.fp8_layers import STORAGE_DTYPE, store_in_fp8

LAYERS = {
    "linear": lambda: nn.Linear(8, 6),
    "conv2d": lambda: nn.Conv2d(3, 5, 3, padding=1, stride=2),
    "conv2d same": lambda: nn.Conv2d(3, 5, 3, padding="same"),
    "conv2d reflect": lambda: nn.Conv2d(3, 5, 3, padding=1, padding_mode="reflect"),
    "conv3d": lambda: nn.Conv3d(2, 4, (1, 3, 3), padding=(0, 1, 1)),
    "conv1d": lambda: nn.Conv1d(3, 4, 3, padding=1, groups=1),
}
INPUTS = {"linear": (2, 4, 8), "conv2d": (2, 3, 9, 9), "conv2d same": (1, 3, 8, 8), "conv2d reflect": (1, 3, 8, 8),
          "conv3d": (1, 2, 3, 6, 6), "conv1d": (2, 3, 10)}


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_the_input_gradient_through_an_fp8_layer_is_the_one_through_its_cast_weight(kind: str) -> None:
    torch.manual_seed(0)
    layer = LAYERS[kind]()
    reference = copy.deepcopy(layer).requires_grad_(False)
    reference.weight.data = reference.weight.data.to(STORAGE_DTYPE).to(torch.bfloat16)  # fp8's rounding
    reference.bias.data = reference.bias.data.to(torch.bfloat16)
    assert store_in_fp8(nn.Sequential(layer), torch.bfloat16) == 1
    assert layer.weight.dtype == STORAGE_DTYPE and not layer.weight.requires_grad

    x = torch.randn(INPUTS[kind], requires_grad=True)
    out = layer(x)
    (out.float() ** 2).sum().backward()
    x_ref = x.detach().to(torch.bfloat16).requires_grad_()
    out_ref = reference(x_ref)
    (out_ref.float() ** 2).sum().backward()

    assert out.dtype == torch.bfloat16 and torch.equal(out, out_ref)
    assert x.grad.dtype == torch.float32 and torch.allclose(x.grad, x_ref.grad.float(), rtol=2e-2, atol=2e-2)
    assert layer.weight.dtype == STORAGE_DTYPE  # still stored in 8 bits after the step


def test_names_and_classes_skipped_keep_their_dtype_and_a_diffusers_model_reports_the_compute_dtype() -> None:
    from diffusers import UNet2DModel

    unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
                       norm_num_groups=4, down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"))
    store_in_fp8(unet, torch.bfloat16, skip_patterns=("norm", "^conv_in$"), skip_classes=(nn.Embedding,))
    assert unet.conv_in.weight.dtype == torch.float32  # by name
    assert unet.down_blocks[0].resnets[0].norm1.weight.dtype == torch.float32  # inside a skipped name
    assert unet.down_blocks[0].resnets[0].conv1.weight.dtype == STORAGE_DTYPE
    assert unet.dtype == torch.bfloat16  # as with diffusers' own layerwise casting
