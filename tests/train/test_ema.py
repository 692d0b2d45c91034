"""trainers/ema.py: the moving average a user gets, by hand."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from trainers.train.ema import EMA


def test_ema_is_the_hand_computed_average_after_two_steps() -> None:
    layer = nn.Linear(2, 1, bias=False)
    frozen = nn.Linear(1, 1)
    frozen.requires_grad_(False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, 2.0]]))
    ema = EMA({"unet": layer, "frozen": frozen}, decay=0.5, update_every=1, place="cpu")
    w0 = layer.weight.detach().clone()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 6.0]]))
    assert ema.update(1)
    w1 = layer.weight.detach().clone()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[5.0, -2.0]]))
    assert ema.update(2)
    w2 = layer.weight.detach().clone()
    expected = 0.5 * (0.5 * w0 + 0.5 * w1) + 0.5 * w2
    assert torch.allclose(ema.state_dict("unet")["weight"], expected)
    assert ema.shadow["frozen"] == {}, "frozen weights are not averaged"
    with ema.applied():
        assert torch.allclose(layer.weight, expected)
    assert torch.equal(layer.weight, w2), "trained weights restored after sampling"


def test_ema_update_every_n_raises_the_decay_to_n() -> None:
    layer = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        layer.weight.fill_(0.0)
    ema = EMA({"unet": layer}, decay=0.5, update_every=2, place="gpu")
    with torch.no_grad():
        layer.weight.fill_(1.0)
    assert not ema.update(1)
    assert ema.update(2)
    assert ema.state_dict("unet")["weight"].item() == pytest.approx(1 - 0.25)
