"""The Wan models beyond Wan 2.1 T2V from ComfyUI's split files (wan_split_files.py writes them from a tiny folder of
each kind): Wan 2.1 I2V with clip_vision_h, the Wan 2.2 A14B pairs (dit = the low-noise expert, dit_high_noise the
high-noise one, musubi-tuner's names) and Wan 2.2 TI2V 5B with its 48-channel VAE in diffusers' layout load as their
folders do and train the same LoRA; the kinds are told apart by their shapes, and a file of the wrong kind, a missing
or mismatched second file, and Wan-AI's wan2.2_vae are named by option and file before anything loads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import train
from safetensors.torch import load_file, save_file
from wan_split_files import LATENTS, comfy_files, tiny_folder

from trainers.core.options import BY_NAME
from trainers.demo import build_dataset
from trainers.models import ModelFiles, load_model
from trainers.models.checks import local_family, model_issues

KINDS = ("i2v", "pair", "pair_i2v", "ti2v")
FAMILIES = {"t2v": "wan21", "i2v": "wan21_i2v", "pair": "wan22", "pair_i2v": "wan22", "ti2v": "wan22_ti2v"}


@pytest.fixture(scope="module", params=KINDS)
def split(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    root = tmp_path_factory.mktemp(f"wan {request.param}")
    folder = tiny_folder(root / "model", request.param)
    return request.param, folder, comfy_files(folder, root / "comfy", request.param)


def _issues(**values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, **values})


def _from_files(files: dict[str, str]) -> object:
    given = dict(files)
    model = given.pop("pretrained_model_name_or_path")
    return load_model(model, str(given.pop("model_family", "auto")), torch.float32,
                      files=ModelFiles.from_values(given))


def _modules(model: object, kind: str) -> dict[str, torch.nn.Module]:
    unet = model.unet  # type: ignore[attr-defined]
    found = {"text encoder": model.text_encoders[0], "vae": model.vae}  # type: ignore[attr-defined]
    if kind in ("pair", "pair_i2v"):
        return {**found, "high-noise expert": unet.transformer, "low-noise expert": unet.transformer_2}
    if kind == "i2v":
        found["image encoder"] = model.family.image_encoder  # type: ignore[attr-defined]
    return {**found, "transformer": unet}


@pytest.mark.slow  # builds, saves and loads a tiny model of each kind twice
def test_comfyuis_files_load_as_the_folder(split: tuple[str, Path, dict]) -> None:
    kind, folder, files = split
    assert _issues(**files) == []  # Validate takes them
    single, ours = _from_files(files), load_model(str(folder), "auto", torch.float32)
    assert single.family.name == ours.family.name == FAMILIES[kind]
    mine, theirs = _modules(single, kind), _modules(ours, kind)
    for what, module in mine.items():
        want = theirs[what].state_dict()
        assert module.state_dict().keys() == want.keys(), what
        assert all(torch.equal(v, want[k]) for k, v in module.state_dict().items()), what
        frozen = {p.requires_grad for p in module.parameters()}
        assert frozen == {p.requires_grad for p in theirs[what].parameters()}, what
    generator = torch.Generator().manual_seed(1)
    hidden, _ = single.encode_texts(["a red fox runs through snow"], 1)
    latents = LATENTS[kind]
    inputs = {"hidden_states": torch.randn(1, 2 * latents + 4 if kind in ("i2v", "pair_i2v") else latents, 2, 4, 4,
                                           generator=generator),
              "timestep": torch.tensor([500.0]), "encoder_hidden_states": hidden, "return_dict": False}
    if kind == "i2v":  # the CLIP features of a frame, through each model's own image processor and encoder
        frame = torch.rand(1, 3, 40, 48, generator=generator) * 2 - 1
        image = single.family.clip_features(frame, torch.device("cpu"))
        assert torch.allclose(image, ours.family.clip_features(frame, torch.device("cpu")), atol=1e-6)
        inputs["encoder_hidden_states_image"] = image
    if kind in ("pair", "pair_i2v"):
        assert single.family.i2v == (kind == "pair_i2v") and single.family.boundary == ours.family.boundary
    with torch.no_grad():
        for what in (w for w in mine if w.endswith(("expert", "transformer"))):
            assert torch.allclose(mine[what](**inputs)[0], theirs[what](**inputs)[0], atol=1e-5), what
        clip = torch.rand(1, 3, 1, 64, 64, generator=generator) * 2 - 1
        assert torch.allclose(single.vae.encode(clip).latent_dist.mode(), ours.vae.encode(clip).latent_dist.mode(),
                              atol=1e-5)


@pytest.mark.slow  # two 2-step LoRA runs of each kind
def test_a_lora_trained_from_the_files_equals_one_from_the_folder(split: tuple[str, Path, dict],
                                                                  tmp_path: Path) -> None:
    kind, folder, files = split
    # SGD: an update in proportion to its gradient (Adam's first steps magnify the last bits of a matmul, which
    # the same weights read from other files differ in, where a gradient is near 0)
    common = {"train_data_dir": str(build_dataset(tmp_path / "data", folder="2_sks shape")), "resolution": "64",
              "max_train_steps": 2, "train_batch_size": 4, "max_data_loader_n_workers": 0, "learning_rate": 1.0,
              "optimizer_type": "SGDNesterov", "network_dim": 4, "save_precision": "float", "seed": 3,
              "timestep_sampling": "shift", "discrete_flow_shift": 3.0}
    assert train("lora", tmp_path / "files", **files, **common, output_dir=str(tmp_path / "a"), output_name="l") == 0
    assert train("lora", tmp_path / "folder", **common, pretrained_model_name_or_path=str(folder),
                 output_dir=str(tmp_path / "b"), output_name="l") == 0
    names = ("l", "l_high_noise", "l_low_noise") if kind in ("pair", "pair_i2v") else ("l",)
    for name in names:
        from_files, from_folder = (load_file(tmp_path / run / f"{name}.safetensors") for run in ("a", "b"))
        assert from_files.keys() == from_folder.keys() and len(from_files) > 0
        trained = max(v.abs().max().item() for k, v in from_folder.items() if k.endswith("lora_up.weight"))
        assert trained > 0, name  # the LoRA learned something to compare
        assert max((from_files[k] - from_folder[k]).abs().max().item() for k in from_files) < 1e-4 * trained, name
    if kind == "i2v":  # the image key and value projections are trained too (musubi-tuner's lora_wan in I2V)
        assert "lora_unet_blocks_0_cross_attn_k_img.lora_up.weight" in load_file(tmp_path / "a" / "l.safetensors")


# --- told apart and refused by name, from the files' headers ---

def _fake(path: Path, channels: int, *extra: str, width: int = 128) -> str:
    """A Wan reference-layout header: its input channels, width and modules, the tensors themselves tiny."""
    state = {"patch_embedding.weight": torch.zeros(width, channels, 1, 1, 1), "head.modulation": torch.zeros(1),
             "head.head.weight": torch.zeros(4, 1), **{k: torch.zeros(1) for k in extra}}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({f"model.diffusion_model.{k}": v for k, v in state.items()}, path)
    return str(path)


IMAGE = ("img_emb.proj.0.weight", "blocks.0.cross_attn.k_img.weight")


@pytest.mark.parametrize("channels, extra, family", [
    (16, (), "wan21"), (36, IMAGE, "wan21_i2v"), (36, (), "wan22"), (48, (), "wan22_ti2v")])
def test_each_kind_is_told_by_its_shapes(tmp_path: Path, channels: int, extra: tuple[str, ...], family: str) -> None:
    assert local_family(_fake(tmp_path / "model.safetensors", channels, *extra)) == family


@pytest.mark.parametrize("requested, channels, extra, named, fix", [
    ("wan21_i2v", 16, (), "a text-to-video Wan model's file", "train it as Wan 2.1"),
    ("wan22", 36, IMAGE, "Wan 2.1 I2V's file", "train it as Wan 2.1 I2V"),
    ("wan22_ti2v", 36, (), "a Wan 2.2 I2V A14B expert's file", "train it as Wan 2.2"),
    ("wan21", 48, (), "Wan 2.2 TI2V 5B's file", "train it as Wan 2.2 TI2V 5B")])
def test_a_file_of_another_kind_is_named_with_the_family_that_reads_it(tmp_path: Path, requested: str, channels: int,
                                                                       extra: tuple[str, ...], named: str,
                                                                       fix: str) -> None:
    model = _fake(tmp_path / "model.safetensors", channels, *extra)
    (issue,) = _issues(pretrained_model_name_or_path=model, model_family=requested)
    assert issue.field == "pretrained_model_name_or_path" and named in issue.message and fix in issue.message, \
        issue.message
    with pytest.raises(Exception, match="model.safetensors is"):  # the run stops before a weight loads
        load_model(model, requested, torch.float32)


def test_a_pair_names_its_high_noise_file(tmp_path: Path) -> None:
    low = _fake(tmp_path / "wan2.2_i2v_low_noise_14B_fp16.safetensors", 36)
    issues = {i.field: i.message for i in _issues(pretrained_model_name_or_path=low)}
    assert "wan2.2_i2v_high_noise_14B_fp16.safetensors" in issues["dit_high_noise"]
    other = _fake(tmp_path / "t2v.safetensors", 16)
    (wrong,) = [i for i in _issues(pretrained_model_name_or_path=low, dit_high_noise=other) if i.field ==
                "dit_high_noise"]
    assert "text-to-video" in wrong.message and "t2v.safetensors" in wrong.message
    narrow = _fake(tmp_path / "narrow.safetensors", 36, width=256)
    (sizes,) = [i for i in _issues(pretrained_model_name_or_path=low, dit_high_noise=narrow) if i.field ==
                "dit_high_noise"]
    assert "other sizes" in sizes.message


def test_a_t2v_pair_is_named_to_train_as_wan22(tmp_path: Path) -> None:
    """A T2V expert's file has Wan 2.1 T2V 14B's layout: given with dit_high_noise but no model_family, the pair is
    named; with model_family = 'wan22' it is read as the pair."""
    low = _fake(tmp_path / "wan2.2_t2v_low_noise_14B_fp16.safetensors", 16)
    high = _fake(tmp_path / "wan2.2_t2v_high_noise_14B_fp16.safetensors", 16)
    issues = {i.field: i.message for i in _issues(pretrained_model_name_or_path=low, dit_high_noise=high)}
    assert "model_family = 'wan22'" in issues["dit_high_noise"]
    named = {i.field for i in _issues(pretrained_model_name_or_path=low, dit_high_noise=high, model_family="wan22")}
    assert named == {"text_encoder", "ae"}  # what a pair of files still lacks, nothing about the pair


def test_wan21_i2v_names_its_clip_file(tmp_path: Path) -> None:
    model = _fake(tmp_path / "wan2.1_i2v_480p_14B_fp16.safetensors", 36, *IMAGE)
    issues = {i.field: i.message for i in _issues(pretrained_model_name_or_path=model)}
    assert "clip_vision_h.safetensors" in issues["clip"] and "set clip" in issues["clip"]
    text = tmp_path / "umt5_xxl_fp16.safetensors"
    save_file({"shared.weight": torch.zeros(4, 2)}, text)
    wrong = {i.field: i.message for i in _issues(pretrained_model_name_or_path=model, clip=str(text))}
    assert "holds no CLIP vision encoder" in wrong["clip"] and text.name in wrong["clip"]
    t2v = _fake(tmp_path / "t2v.safetensors", 16)
    assert "Wan 2.1 I2V's (model_family = 'wan21_i2v')" in {i.field: i.message for i in _issues(pretrained_model_name_or_path=t2v,
                                                                      clip=str(text))}["clip"]


def test_wan_ais_wan22_vae_is_refused_by_name_with_the_file_that_is_read(tmp_path: Path) -> None:
    model = _fake(tmp_path / "wan2.2_ti2v_5B_fp16.safetensors", 48)
    vae = tmp_path / "wan2.2_vae.safetensors"  # Wan-AI's names: each stage nests its blocks
    save_file({"encoder.conv1.weight": torch.zeros(8, 12, 3, 3, 3), "conv2.weight": torch.zeros(48, 48, 1, 1, 1),
               "decoder.conv1.weight": torch.zeros(8, 48, 3, 3, 3),
               "encoder.downsamples.0.downsamples.0.residual.2.weight": torch.zeros(1)}, vae)
    issues = [i for i in _issues(pretrained_model_name_or_path=model, ae=str(vae)) if i.field == "ae"]
    assert len(issues) == 1 and "Wan-AI's layout" in issues[0].message and "diffusion_pytorch_model" in \
        issues[0].message


def test_a_folder_refuses_the_files_a_single_file_reads(tmp_path: Path) -> None:
    folder = tmp_path / "Wan2.2-T2V-A14B-Diffusers"
    folder.mkdir()
    transformer = ["diffusers", "WanTransformer3DModel"]
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline", "transformer": transformer,
                                                         "transformer_2": transformer, "boundary_ratio": 0.875}))
    high = _fake(tmp_path / "high.safetensors", 16)
    issues = {i.field: i.message for i in _issues(pretrained_model_name_or_path=str(folder), dit_high_noise=high)}
    assert "diffusers folder holds its own" in issues["dit_high_noise"]


def test_the_weights_of_both_experts_are_counted(tmp_path: Path) -> None:
    """The memory estimate counts a pair's second expert (dit_high_noise) beside the model file."""
    from trainers.core.weights_memory import model_parts

    low = _fake(tmp_path / "low.safetensors", 36)
    high = _fake(tmp_path / "high.safetensors", 36)
    one = sum(p.params for p in model_parts({"pretrained_model_name_or_path": low}) if p.kind == "denoiser")
    both = sum(p.params for p in model_parts({"pretrained_model_name_or_path": low, "dit_high_noise": high})
               if p.kind == "denoiser")
    assert one > 0 and both == 2 * one
