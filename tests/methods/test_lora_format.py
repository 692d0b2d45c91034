"""LoRA network key names, file format/metadata, diffusers compatibility and resume
(trainers/lora_network.py, trainers/lora_format.py), on the tiny SD1/SDXL pipelines."""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import DiffusionPipeline, StableDiffusionPipeline, StableDiffusionXLPipeline
from peft.tuners.tuners_utils import BaseTunerLayer

from trainers.methods.lora.file_format import (
    DatasetDir,
    TrainingMetadata,
    build_metadata,
    read_lora_file,
    save_lora_file,
)
from trainers.methods.lora.network import LoRANetwork, NetworkDims

DIM, ALPHA, CONV_DIM, CONV_ALPHA = 4, 2.0, 2, 1.0


@dataclass(frozen=True)
class Case:
    family: str  # "sd1" | "sdxl"
    conv: bool = False
    train_unet: bool = True

    def __str__(self) -> str:
        return self.family + ("-conv" if self.conv else "") + ("" if self.train_unet else "-te-only")


CASES = [Case("sd1"), Case("sd1", conv=True), Case("sdxl"), Case("sdxl", conv=True)]

# Expected module counts, worked out by hand from the tiny layouts in trainers/models/tiny.py.
# SD1: 6 Transformer2DModels (down0: 2, mid: 1, up1: 3) x 1 block x (proj_in/out + 2x4 attn + 2 ff) = 72;
#      TE: 2 layers x 6 linears = 12. LoCon adds 12 resnets x (conv1, conv2, time_emb_proj) = 36,
#      7 conv_shortcuts (down1.res0, 3 in each up block), 1 downsampler, 1 upsampler = 45.
# SDXL: 6 Transformer2DModels (down1: 2, mid: 1, up0: 3) x (2 + 2 blocks x 10) = 132; 2 TEs x 12 = 24;
#      LoCon adds the same 45 (1 shortcut in down1, 3 in each up block).
EXPECTED_COUNTS = {"sd1": 72 + 12, "sd1-conv": 72 + 12 + 45, "sdxl": 132 + 24, "sdxl-conv": 132 + 24 + 45}

# A few hand-written kohya names per layout: (name, rank, down weight shape)
KNOWN_MODULES = {
    "sd1": [
        ("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q", DIM, (DIM, 32)),
        ("lora_unet_down_blocks_0_attentions_1_proj_in", DIM, (DIM, 32, 1, 1)),
        ("lora_unet_mid_block_attentions_0_transformer_blocks_0_attn2_to_k", DIM, (DIM, 32)),
        ("lora_unet_up_blocks_1_attentions_2_transformer_blocks_0_ff_net_0_proj", DIM, (DIM, 32)),
        ("lora_unet_up_blocks_1_attentions_0_transformer_blocks_0_attn1_to_out_0", DIM, (DIM, 32)),
        ("lora_te_text_model_encoder_layers_0_self_attn_q_proj", DIM, (DIM, 32)),
        ("lora_te_text_model_encoder_layers_1_mlp_fc2", DIM, (DIM, 64)),
    ],
    "sd1-conv": [
        ("lora_unet_down_blocks_0_resnets_1_conv1", CONV_DIM, (CONV_DIM, 32, 3, 3)),
        ("lora_unet_down_blocks_1_resnets_0_conv_shortcut", DIM, (DIM, 32, 1, 1)),
        ("lora_unet_down_blocks_0_downsamplers_0_conv", CONV_DIM, (CONV_DIM, 32, 3, 3)),
        ("lora_unet_mid_block_resnets_1_time_emb_proj", DIM, (DIM, 128)),
        ("lora_unet_up_blocks_0_upsamplers_0_conv", CONV_DIM, (CONV_DIM, 64, 3, 3)),
    ],
    "sdxl": [
        ("lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q", DIM, (DIM, 64)),
        ("lora_unet_input_blocks_5_1_transformer_blocks_1_attn2_to_k", DIM, (DIM, 64)),
        ("lora_unet_input_blocks_4_1_proj_in", DIM, (DIM, 64)),
        ("lora_unet_middle_block_1_transformer_blocks_1_ff_net_2", DIM, (DIM, 256)),
        ("lora_unet_output_blocks_2_1_transformer_blocks_0_attn1_to_out_0", DIM, (DIM, 64)),
        ("lora_te1_text_model_encoder_layers_0_self_attn_q_proj", DIM, (DIM, 32)),
        ("lora_te2_text_model_encoder_layers_1_mlp_fc1", DIM, (DIM, 32)),
    ],
    "sdxl-conv": [
        ("lora_unet_input_blocks_1_0_in_layers_2", CONV_DIM, (CONV_DIM, 32, 3, 3)),
        ("lora_unet_input_blocks_3_0_op", CONV_DIM, (CONV_DIM, 32, 3, 3)),
        ("lora_unet_input_blocks_4_0_skip_connection", DIM, (DIM, 32, 1, 1)),
        ("lora_unet_middle_block_2_emb_layers_1", DIM, (DIM, 128)),
        ("lora_unet_output_blocks_2_2_conv", CONV_DIM, (CONV_DIM, 64, 3, 3)),
        ("lora_unet_output_blocks_5_0_out_layers_3", CONV_DIM, (CONV_DIM, 32, 3, 3)),
    ],
}
LOCON_ONLY = re.compile(r"resnets|samplers|in_layers|out_layers|emb_layers|skip_connection|_op$|_\d_conv$")


# --------------------------------------------------------------------------- helpers

@pytest.fixture(autouse=True, scope="module")
def flush_denormals():
    """Random LoRA weights on random tiny models produce subnormal floats, which are ~20x slower on CPU."""
    torch.set_flush_denormal(True)
    yield
    torch.set_flush_denormal(False)


@pytest.fixture
def pipe_dirs(tiny_sd1_dir: Path, tiny_sdxl_dir: Path) -> dict[str, Path]:
    return {"sd1": tiny_sd1_dir, "sdxl": tiny_sdxl_dir}


def load_pipe(folder: Path, family: str) -> DiffusionPipeline:
    cls = StableDiffusionXLPipeline if family == "sdxl" else StableDiffusionPipeline
    pipe = cls.from_pretrained(folder)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def text_encoders(pipe: DiffusionPipeline) -> list[torch.nn.Module]:
    return [te for te in (pipe.text_encoder, getattr(pipe, "text_encoder_2", None)) if te is not None]


def make_network(pipe: DiffusionPipeline, case: Case, dim: int = DIM) -> LoRANetwork:
    return LoRANetwork(
        pipe.unet, text_encoders(pipe),
        unet_key_style="sgm" if case.family == "sdxl" else "diffusers",
        network_dim=dim, network_alpha=ALPHA,
        conv_dim=CONV_DIM if case.conv else None, conv_alpha=CONV_ALPHA if case.conv else None,
        train_unet=case.train_unet,
    )


def simulate_training(network: LoRANetwork, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, lora in network.named_modules_for_kohya():
            weight = lora.lora_up.weight
            weight.copy_(torch.randn(weight.shape, generator=generator) * 0.3)


def render(pipe: DiffusionPipeline) -> np.ndarray:
    generator = torch.Generator().manual_seed(0)
    result = pipe("a photo of a cat", num_inference_steps=2, height=64, width=64, generator=generator,
                  output_type="np")
    return result.images[0]


def metadata_for(case: Case, **changes: object) -> TrainingMetadata:
    from trainers.models import family

    if isinstance(changes.get("family"), str):
        changes["family"] = family(changes["family"])
    info = TrainingMetadata(
        family=family("sdxl" if case.family == "sdxl" else "sd1"),
        sd_model_name="tiny", network_dim=DIM, network_alpha=ALPHA,
        conv_dim=CONV_DIM if case.conv else None, conv_alpha=CONV_ALPHA if case.conv else None,
        resolution=(512, 512), epoch=2, num_epochs=4, steps=20, max_train_steps=40, learning_rate=1e-4,
        unet_lr=1e-4, text_encoder_lr=5e-5, num_train_images=10, num_reg_images=0, batch_size=2,
        output_name="my_lora", clip_skip=2, mixed_precision="bf16", seed=42,
        training_started_at=1_700_000_000.0, training_finished_at=1_700_000_600.0,
        dataset_dirs={"10_cat": DatasetDir(n_repeats=10, img_count=5)},
        tag_frequency={"10_cat": {"cat": 5, "sitting": 2}},
    )
    return replace(info, **changes)  # type: ignore[arg-type]


def save_network(network: LoRANetwork, case: Case, path: Path) -> Path:
    save_lora_file(path, network.kohya_state_dict(torch.float32), build_metadata(metadata_for(case)))
    return path


# --------------------------------------------------------------------------- key names

@pytest.mark.parametrize("case", CASES, ids=str)
def test_saved_keys_are_kohya_names(case: Case, pipe_dirs: dict[str, Path], tmp_path: Path) -> None:
    pipe = load_pipe(pipe_dirs[case.family], case.family)
    network = make_network(pipe, case)
    tensors, _ = read_lora_file(save_network(network, case, tmp_path / "lora.safetensors"))

    names = {key.split(".")[0] for key in tensors}
    assert len(names) == EXPECTED_COUNTS[str(case)] == len(network.named_modules_for_kohya())
    assert set(tensors) == {f"{n}.{part}" for n in names for part in ("lora_down.weight", "lora_up.weight", "alpha")}
    assert all(n.startswith(("lora_unet_", "lora_te_text_model_", "lora_te1_text_model_", "lora_te2_text_model_"))
               for n in names)
    if not case.conv:
        assert not [n for n in names if LOCON_ONLY.search(n)]

    known = KNOWN_MODULES[case.family] + (KNOWN_MODULES[f"{case.family}-conv"] if case.conv else [])
    for name, rank, down_shape in known:
        down, up, alpha = (tensors[f"{name}.{part}"] for part in ("lora_down.weight", "lora_up.weight", "alpha"))
        assert tuple(down.shape) == down_shape, name
        assert up.shape[1] == rank and (up.dim() == 2 or tuple(up.shape[2:]) == (1, 1)), name
        assert alpha.dim() == 0 and float(alpha) == (CONV_ALPHA if rank == CONV_DIM else ALPHA), name
        assert not up.any(), "lora_up starts at zero (kohya's init)"

    for name in names:  # 3x3 convs take conv_dim/conv_alpha, everything else network_dim/network_alpha
        down = tensors[f"{name}.lora_down.weight"]
        is_3x3 = down.dim() == 4 and down.shape[-1] == 3
        assert (down.shape[0], float(tensors[f"{name}.alpha"])) == ((CONV_DIM, CONV_ALPHA) if is_3x3 else (DIM, ALPHA))


def test_unet_only_and_text_encoder_only(tiny_sd1_dir: Path) -> None:
    pipe = load_pipe(tiny_sd1_dir, "sd1")
    kwargs = dict(unet_key_style="diffusers", network_dim=DIM, network_alpha=ALPHA)
    unet_only = LoRANetwork(pipe.unet, [pipe.text_encoder], train_text_encoder=False, **kwargs)
    te_only = LoRANetwork(pipe.unet, [pipe.text_encoder], train_unet=False, **kwargs)
    assert unet_only.text_encoder_parameters() == [] and len(unet_only.unet_parameters()) == 2 * 72
    assert te_only.unet_parameters() == [] and len(te_only.text_encoder_parameters()) == 2 * 12
    with pytest.raises(ValueError, match="nothing to train"):
        LoRANetwork(pipe.unet, [pipe.text_encoder], train_unet=False, train_text_encoder=False, **kwargs)


# --------------------------------------------------------------------------- diffusers compatibility

@pytest.mark.parametrize("case", [*CASES, Case("sdxl", train_unet=False)], ids=str)
def test_diffusers_loads_the_file(case: Case, pipe_dirs: dict[str, Path], tmp_path: Path,
                                  caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder) -> None:
    pipe = load_pipe(pipe_dirs[case.family], case.family)
    base_image = render(pipe)
    network = make_network(pipe, case)
    simulate_training(network)
    path = save_network(network, case, tmp_path / "lora.safetensors")
    network.apply_to()
    our_image = render(pipe)
    assert np.abs(our_image - base_image).max() > 1e-2, "the trained LoRA should change the image"

    other = load_pipe(pipe_dirs[case.family], case.family)
    diffusers_logger = logging.getLogger("diffusers")  # diffusers does not propagate to the root logger
    diffusers_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING):
            other.load_lora_weights(str(path), adapter_name="trained")
    finally:
        diffusers_logger.removeHandler(caplog.handler)
    messages = [r.getMessage() for r in caplog.records] + [str(w.message) for w in recwarn]
    if not case.train_unet:  # diffusers says so, correctly, for a file without UNet keys
        messages = [m for m in messages if not m.startswith("No LoRA keys associated to UNet2DConditionModel")]
    complaints = [m for m in messages if re.search(r"unexpected|missing|not found|mismatch|incompatible", m, re.I)]
    assert complaints == []
    injected = sum(isinstance(m, BaseTunerLayer) for part in [other.unet, *text_encoders(other)]
                   for m in part.modules())
    assert injected == len(network.named_modules_for_kohya())

    np.testing.assert_allclose(render(other), our_image, atol=1e-4)  # same rank/alpha scaling as ours
    other.set_adapters(["trained"], adapter_weights=[0.0])
    np.testing.assert_allclose(render(other), base_image, atol=1e-5)


# --------------------------------------------------------------------------- resume

def test_resume_restores_identical_tensors(tiny_sdxl_dir: Path, tmp_path: Path) -> None:
    case = Case("sdxl", conv=True)
    trained = make_network(load_pipe(tiny_sdxl_dir, "sdxl"), case)
    simulate_training(trained)
    tensors, _ = read_lora_file(save_network(trained, case, tmp_path / "lora.safetensors"))
    assert LoRANetwork.dims_from_state_dict(tensors) == NetworkDims(DIM, ALPHA, CONV_DIM, CONV_ALPHA)

    resumed = make_network(load_pipe(tiny_sdxl_dir, "sdxl"), case)
    resumed.load_kohya_state_dict(tensors)
    expected, actual = trained.kohya_state_dict(torch.float32), resumed.kohya_state_dict(torch.float32)
    assert expected.keys() == actual.keys()
    assert all(torch.equal(expected[key], actual[key]) for key in expected)


def test_resume_reports_mismatches_clearly(tiny_sd1_dir: Path) -> None:
    pipe = load_pipe(tiny_sd1_dir, "sd1")
    rank4 = make_network(pipe, Case("sd1")).kohya_state_dict(torch.float32)
    with pytest.raises(ValueError, match="network_dim 8 in config but the file has rank 4"):
        make_network(pipe, Case("sd1"), dim=8).load_kohya_state_dict(rank4)
    with pytest.raises(ValueError, match="135 keys missing from the file: lora_unet_down_blocks_0_downsamplers_0_conv"):
        make_network(pipe, Case("sd1", conv=True)).load_kohya_state_dict(rank4)
    te_only = make_network(pipe, Case("sd1", train_unet=False))
    with pytest.raises(ValueError, match="216 unexpected keys in the file: lora_unet_"):
        te_only.load_kohya_state_dict(rank4)
    changed_alpha = {k: (torch.tensor(8.0) if k.endswith(".alpha") else v) for k, v in rank4.items()}
    with pytest.raises(ValueError, match="network_alpha 2 in config but the file has alpha 8"):
        make_network(pipe, Case("sd1")).load_kohya_state_dict(changed_alpha)


# --------------------------------------------------------------------------- file and metadata

@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_file_permissions_follow_umask(umask: int, mode: int, tmp_path: Path) -> None:
    previous = os.umask(umask)
    try:
        save_lora_file(tmp_path / "lora.safetensors", {"x.alpha": torch.tensor(1.0)}, {"k": "v"})
    finally:
        os.umask(previous)
    assert (tmp_path / "lora.safetensors").stat().st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == ["lora.safetensors"]


def test_failed_save_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "lora.safetensors"
    save_lora_file(path, {"x.alpha": torch.tensor(1.0)}, {"version": "old"})
    shared = torch.zeros(4)
    with pytest.raises(Exception):  # safetensors refuses tensors sharing memory
        save_lora_file(path, {"a": shared, "b": shared[:2]}, {"version": "new"})
    with pytest.raises(TypeError, match="strings"):
        save_lora_file(path, {"x.alpha": torch.tensor(1.0)}, {"version": 2})  # type: ignore[dict-item]
    assert read_lora_file(path)[1] == {"version": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["lora.safetensors"]


def test_metadata_sdxl_locon(tmp_path: Path) -> None:
    metadata = build_metadata(metadata_for(Case("sdxl", conv=True)))
    assert all(isinstance(value, str) for value in metadata.values())
    assert metadata["ss_base_model_version"] == "sdxl_base_v1-0" and metadata["ss_v2"] == "False"
    assert metadata["ss_network_module"] == "networks.lora"
    assert (metadata["ss_network_dim"], metadata["ss_network_alpha"]) == ("4", "2.0")
    assert json.loads(metadata["ss_network_args"]) == {"conv_dim": "2", "conv_alpha": "1.0"}
    assert metadata["ss_resolution"] == "(512, 512)"
    assert json.loads(metadata["ss_dataset_dirs"]) == {"10_cat": {"n_repeats": 10, "img_count": 5}}
    assert json.loads(metadata["ss_tag_frequency"]) == {"10_cat": {"cat": 5, "sitting": 2}}
    expected = {
        "ss_num_epochs": "4", "ss_epoch": "2", "ss_steps": "20", "ss_max_train_steps": "40",
        "ss_learning_rate": "0.0001", "ss_unet_lr": "0.0001", "ss_text_encoder_lr": "5e-05",
        "ss_num_train_images": "10", "ss_num_reg_images": "0", "ss_batch_size_per_device": "2",
        "ss_output_name": "my_lora", "ss_clip_skip": "2", "ss_mixed_precision": "bf16", "ss_seed": "42",
        "ss_training_started_at": "1700000000.0", "ss_training_finished_at": "1700000600.0",
        "ss_sd_model_name": "tiny", "ss_v_parameterization": "False",
        "modelspec.sai_model_spec": "1.0.1", "modelspec.architecture": "stable-diffusion-xl-v1-base/lora",
        "modelspec.implementation": "https://github.com/Stability-AI/generative-models",
        "modelspec.title": "my_lora", "modelspec.resolution": "512x512", "modelspec.prediction_type": "epsilon",
    }
    assert {key: metadata[key] for key in expected} == expected
    assert re.fullmatch(r"2023-11-1\dT\d\d:\d\d:\d\d", metadata["modelspec.date"])

    path = tmp_path / "lora.safetensors"
    save_lora_file(path, {"x.alpha": torch.tensor(1.0)}, metadata)
    assert read_lora_file(path)[1] == metadata


@pytest.mark.parametrize("changes, architecture, prediction", [
    ({"family": "sd1"}, "stable-diffusion-v1/lora", "epsilon"),
    ({"family": "sd2", "v_parameterization": True}, "stable-diffusion-v2-768-v/lora", "v"),
    ({"family": "sd2"}, "stable-diffusion-v2-512/lora", "epsilon"),
])
def test_metadata_sd_families(changes: dict[str, object], architecture: str, prediction: str) -> None:
    metadata = build_metadata(metadata_for(Case("sd1"), clip_skip=None, **changes))
    assert metadata["ss_base_model_version"] == {"sd1": "sd_v1", "sd2": "sd_v2"}[str(changes["family"])]
    assert metadata["modelspec.architecture"] == architecture
    assert metadata["modelspec.prediction_type"] == prediction
    assert metadata["modelspec.implementation"] == "diffusers"
    assert metadata["ss_v2"] == str(changes["family"] == "sd2")
    assert "ss_network_args" not in metadata and "ss_clip_skip" not in metadata


# --------------------------------------------------------------------------- training mechanics

def test_trains_under_bf16_autocast_with_gradient_checkpointing(tiny_sd1_dir: Path) -> None:
    pipe = load_pipe(tiny_sd1_dir, "sd1")
    pipe.unet.requires_grad_(False)
    pipe.text_encoder.requires_grad_(False)
    pipe.unet.enable_gradient_checkpointing()
    pipe.unet.train()
    pipe.text_encoder.to(torch.bfloat16)  # frozen bf16 base, fp32 LoRA weights, no autocast
    network = make_network(pipe, Case("sd1", conv=True))
    network.apply_to()

    ids = torch.randint(0, 100, (1, 77))
    hidden = pipe.text_encoder(ids).last_hidden_state
    assert hidden.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pred = pipe.unet(torch.randn(1, 4, 8, 8), 10, encoder_hidden_states=hidden.float()).sample
    pred.float().pow(2).mean().backward()
    grads = [p.grad for p in network.unet_parameters() + network.text_encoder_parameters()]
    assert all(g is not None and g.dtype == torch.float32 for g in grads)
    ups = [lora.lora_up.weight.grad for _, lora in network.named_modules_for_kohya()]
    assert all(g is not None and g.abs().sum() > 0 for g in ups)
