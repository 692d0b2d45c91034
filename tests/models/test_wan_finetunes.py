"""Full finetunes of every Wan variant on tiny random-init models of its real diffusers classes: a 2-step finetune
from clips saves a diffusers folder that is claimed as the same family again and that its diffusers pipeline loads
whole (Wan 2.2 TI2V's expand_timesteps, Wan 2.1 I2V's CLIP image encoder and processor, the A14B pair's two experts
and the run's boundary); a pair's run trains the expert train_expert names and saves the other as it was; and
offload_inactive_dit, which keeps a frozen copy of the expert not called, is refused by name for full weights."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from family_checks import clips_dataset

from trainers.core.options import BY_NAME
from trainers.models.checks import model_issues
from trainers.models.wan.i2v21.tiny import build_tiny_wan21_i2v
from trainers.models.wan.ti2v.tiny import build_tiny_wan22_ti2v
from trainers.models.wan.tiny import build_tiny_wan
from trainers.models.wan.wan22.tiny import build_tiny_wan22

VARIANTS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "wan21": (build_tiny_wan, "WanPipeline"),
    "wan22_ti2v": (build_tiny_wan22_ti2v, "WanPipeline"),
    "wan21_i2v": (build_tiny_wan21_i2v, "WanImageToVideoPipeline"),
    "wan22": (build_tiny_wan22, "WanPipeline"),
}


def _finetune(tmp: Path, model: Path, *settings: str) -> Path:
    from helpers import train

    assert train("finetune", tmp / "run", *settings, pretrained_model_name_or_path=str(model),
                 dataset_config=str(clips_dataset(tmp / "data")), output_dir=str(tmp / "out"),
                 max_data_loader_n_workers=0, learning_rate=1e-3, save_precision="float", timestep_sampling="shift",
                 discrete_flow_shift=3.0, max_train_steps=2, output_name="ft") == 0
    return tmp / "out" / "ft"


def _changed(before: torch.nn.Module, after: torch.nn.Module) -> int:
    trained = after.state_dict()
    return sum(not torch.equal(value, trained[key]) for key, value in before.state_dict().items())


@pytest.mark.slow
@pytest.mark.parametrize("family", VARIANTS)
def test_a_finetune_saves_a_folder_claimed_again_that_its_pipeline_loads(family: str, tmp_path: Path) -> None:
    import diffusers

    from trainers.models import load_model
    from trainers.models.rules import folder_rules

    build, pipeline = VARIANTS[family]
    tiny = build(tmp_path / "model")
    folder = _finetune(tmp_path, tiny)
    assert folder_rules(folder).name == family
    index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    assert "feature_extractor" not in index  # SD's IP-Adapter slots, which WanPipeline warns it ignores
    pipe = getattr(diffusers, pipeline).from_pretrained(folder)
    assert type(pipe.vae).__name__ == "AutoencoderKLWan"
    before, after = load_model(str(tiny), "auto", torch.float32), load_model(str(folder), "auto", torch.float32)
    assert _changed(before.unet, after.unet) > 0
    for ours, theirs in zip(before.text_encoders, after.text_encoders):
        assert _changed(ours, theirs) == 0
    if family == "wan21_i2v":
        assert type(pipe.image_encoder).__name__ == "CLIPVisionModel"
        assert _changed(before.family.image_encoder, after.family.image_encoder) == 0
    if family == "wan22_ti2v":
        assert pipe.config.expand_timesteps is True


@pytest.mark.slow
@pytest.mark.parametrize("expert, trained, kept", [("high_noise", "transformer", "transformer_2"),
                                                   ("low_noise", "transformer_2", "transformer")])
def test_a_pair_finetune_trains_the_expert_named_and_keeps_the_other(expert: str, trained: str, kept: str,
                                                                     tmp_path: Path) -> None:
    from diffusers import WanPipeline

    from trainers.models import load_model

    tiny = build_tiny_wan22(tmp_path / "model")
    folder = _finetune(tmp_path, tiny, f'train_expert="{expert}"', "timestep_boundary=0.7")
    before, after = load_model(str(tiny), "auto", torch.float32), load_model(str(folder), "auto", torch.float32)
    assert _changed(getattr(before.unet, trained), getattr(after.unet, trained)) > 0
    assert _changed(getattr(before.unet, kept), getattr(after.unet, kept)) == 0
    assert json.loads((folder / "model_index.json").read_text(encoding="utf-8"))["boundary_ratio"] == 0.7
    assert WanPipeline.from_pretrained(folder).config.boundary_ratio == 0.7  # where the run's experts switch


def test_offload_inactive_dit_is_refused_for_full_weights_only(tmp_path: Path) -> None:
    tiny = build_tiny_wan22(tmp_path / "model")
    values = {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(tiny),
              "offload_inactive_dit": True}
    refused = [issue for issue in model_issues(values, trains="full") if issue.field == "offload_inactive_dit"]
    assert len(refused) == 1 and "full-weight" in refused[0].message and "blocks_to_swap" in refused[0].message
    assert not [issue for issue in model_issues(values, trains="network") if issue.field == "offload_inactive_dit"]


@pytest.mark.slow
def test_a_resumed_pair_finetune_equals_the_uninterrupted_one(tmp_path: Path) -> None:
    from helpers import events, train
    from safetensors.torch import load_file

    tiny = build_tiny_wan22(tmp_path / "model")
    out = tmp_path / "out"
    common = {"pretrained_model_name_or_path": str(tiny), "dataset_config": str(clips_dataset(tmp_path / "data")),
              "output_dir": str(out), "max_data_loader_n_workers": 0, "learning_rate": 1e-3, "save_precision": "float",
              "timestep_sampling": "uniform", "timestep_boundary": 0.5, "max_train_steps": 4}
    assert train("finetune", tmp_path / "straight", **common, output_name="straight", save_every_n_steps=1,
                 save_state=True) == 0
    assert train("finetune", tmp_path / "resumed", **common, output_name="resumed",
                 resume=str(out / "straight-step00000001-state")) == 0
    assert [e["step"] for e in events(tmp_path / "resumed") if e["type"] == "progress"] == [2, 3, 4]
    for expert in ("transformer", "transformer_2"):
        base, straight, resumed = (load_file(folder / expert / "diffusion_pytorch_model.safetensors")
                                   for folder in (tiny, out / "straight", out / "resumed"))
        assert straight.keys() == resumed.keys() and any(not torch.equal(base[k], straight[k]) for k in base)
        assert max((straight[k] - resumed[k]).abs().max().item() for k in straight) < 1e-6
