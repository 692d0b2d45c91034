"""Single-file checkpoints: original (LDM/SGM) key layout, family detection, offline loading, saving.

Tiny models stand in for real ones (their configs are passed as `config_dir`); the shipped
real-size configs are checked on the meta device, where only names and shapes exist.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from trainers.core.fsio import read_safetensors_header
from trainers.models import ModelLoadError, family, load_model
from trainers.models.base import LoadedModel
from trainers.models.sd.tiny import build_tiny_sd1
from trainers.models.single_file import (
    build_components,
    clip_tokenizer,
    detect_checkpoint_family,
    folder_tokenizer,
    load_single_file,
    original_layout,
    save_full_model,
)

SD1_KEYS = [
    "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn1.to_q.weight",
    "model.diffusion_model.input_blocks.0.0.weight",
    "model.diffusion_model.input_blocks.1.0.in_layers.2.weight",
    "model.diffusion_model.input_blocks.3.0.op.weight",
    "model.diffusion_model.middle_block.1.proj_in.weight",
    "model.diffusion_model.middle_block.2.out_layers.3.weight",
    "model.diffusion_model.output_blocks.2.1.conv.weight",  # upsampler after a block without attention
    "model.diffusion_model.out.2.weight",
    "model.diffusion_model.time_embed.0.weight",
    "first_stage_model.encoder.conv_in.weight",
    "first_stage_model.encoder.mid.attn_1.q.weight",
    "first_stage_model.decoder.up.0.block.0.nin_shortcut.weight",
    "first_stage_model.encoder.down.1.block.0.nin_shortcut.weight",
    "first_stage_model.quant_conv.weight",
    "cond_stage_model.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight",
    "cond_stage_model.transformer.text_model.embeddings.position_ids",
    "cond_stage_model.transformer.text_model.final_layer_norm.weight",
]
SDXL_KEYS = [
    "model.diffusion_model.input_blocks.4.1.transformer_blocks.0.attn2.to_k.weight",
    "model.diffusion_model.input_blocks.4.1.transformer_blocks.1.ff.net.0.proj.weight",
    "model.diffusion_model.label_emb.0.0.weight",
    "model.diffusion_model.output_blocks.2.2.conv.weight",  # upsampler after a block with attention
    "first_stage_model.decoder.mid.attn_1.proj_out.weight",
    "conditioner.embedders.0.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight",
    "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight",
    "conditioner.embedders.1.model.transformer.resblocks.1.mlp.c_fc.weight",
    "conditioner.embedders.1.model.token_embedding.weight",
    "conditioner.embedders.1.model.positional_embedding",
    "conditioner.embedders.1.model.ln_final.weight",
    "conditioner.embedders.1.model.text_projection",
]


def _models(model: LoadedModel) -> list[tuple[str, torch.nn.Module]]:
    return [("unet", model.unet), ("vae", model.vae)] + [(f"te{i}", te) for i, te in enumerate(model.text_encoders)]


def assert_same_weights(a: LoadedModel, b: LoadedModel) -> None:
    for (name, ma), (_, mb) in zip(_models(a), _models(b), strict=True):
        sa, sb = ma.state_dict(), mb.state_dict()
        assert sa.keys() == sb.keys(), name
        different = [k for k in sa if not torch.equal(sa[k], sb[k])]
        assert not different, f"{name}: {different[:3]}"


def render(model: LoadedModel, folder: Path) -> np.ndarray:
    """A fixed-seed 64 px image through the diffusers pipeline of the model's family."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline, StableDiffusionXLPipeline

    scheduler = DDIMScheduler.from_pretrained(folder, subfolder="scheduler") \
        if "DDIM" in (folder / "scheduler" / "scheduler_config.json").read_text() else \
        DDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, clip_sample=False)
    parts = dict(unet=model.unet, vae=model.vae, text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0],
                 scheduler=scheduler)
    if model.family.name == "sdxl":
        pipe = StableDiffusionXLPipeline(text_encoder_2=model.text_encoders[1], tokenizer_2=model.tokenizers[1],
                                         **parts)
    else:
        pipe = StableDiffusionPipeline(safety_checker=None, feature_extractor=None, requires_safety_checker=False,
                                       **parts)
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a photo of a cat", height=64, width=64, num_inference_steps=2, guidance_scale=5.0,
               generator=torch.Generator().manual_seed(7), output_type="np")
    return out.images[0]


@pytest.fixture(scope="module")
def sd1(tiny_sd1_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[LoadedModel, Path]:
    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    [file] = save_full_model(model, tmp_path_factory.mktemp("sd1") / "tiny-sd1", as_diffusers=False,
                             as_single_file=True, dtype=torch.float32)
    return model, file


@pytest.fixture(scope="module")
def sdxl(tiny_sdxl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[LoadedModel, Path]:
    model = load_model(str(tiny_sdxl_dir), "auto", torch.float32)
    [file] = save_full_model(model, tmp_path_factory.mktemp("sdxl") / "tiny-sdxl.safetensors", as_diffusers=False,
                             as_single_file=True, dtype=torch.float32)
    return model, file


# ---- the original layout -----------------------------------------------------------------------

@pytest.mark.parametrize(("family", "expected"), [("sd1", SD1_KEYS), ("sdxl", SDXL_KEYS)])
def test_single_file_has_the_original_key_names(family: str, expected: list[str], request: pytest.FixtureRequest
                                                ) -> None:
    model, file = request.getfixturevalue(family)
    assert file.name.endswith(".safetensors") and file.parent.is_dir()
    with safe_open(file, "pt") as f:
        keys = set(f.keys())
        meta = f.metadata()
        assert f.get_slice("first_stage_model.encoder.mid.attn_1.q.weight").get_shape()[2:] == [1, 1]  # 1x1 conv
    missing = [k for k in expected if k not in keys]
    assert not missing
    prefixes = {"model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer.text_model.",
                "conditioner.embedders.0.transformer.text_model.", "conditioner.embedders.1.model."}
    assert all(any(k.startswith(p) for p in prefixes) for k in keys)
    assert not any(".text_model.text_model." in k or "lora" in k for k in keys)
    assert meta["modelspec.architecture"] == model.family.modelspec_architecture
    assert meta["modelspec.prediction_type"] == "epsilon"
    assert stat.S_IMODE(file.stat().st_mode) == 0o666 & ~_umask()  # readable by another user's ComfyUI


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_round_trip_gives_identical_weights_and_image(family: str, request: pytest.FixtureRequest) -> None:
    model, file = request.getfixturevalue(family)
    folder = Path(model.source)
    loaded = load_single_file(file, family, torch.float32, config_dir=folder)
    assert loaded.family is model.family and loaded.source == str(file)
    assert loaded.prediction_type == "epsilon"
    assert_same_weights(model, loaded)
    assert np.array_equal(render(model, folder), render(loaded, folder))


def test_text_projection_of_sdxl_is_the_openclip_matrix(sdxl: tuple[LoadedModel, Path]) -> None:
    model, file = sdxl
    with safe_open(file, "pt") as f:
        projection = f.get_tensor("conditioner.embedders.1.model.text_projection")
        in_proj = f.get_tensor("conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight")
    te2 = model.text_encoders[1]
    assert torch.equal(projection, te2.text_projection.weight.T)  # OpenCLIP: x @ text_projection
    attn = te2.text_model.encoder.layers[0].self_attn
    assert torch.equal(in_proj, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))


# ---- real-size architectures (meta device) -------------------------------------------------------

def _meta_model(family_name: str) -> LoadedModel:
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    folder = family(family_name).arch_dir
    with torch.device("meta"):
        unet = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(folder / "unet"))
        vae = AutoencoderKL.from_config(AutoencoderKL.load_config(folder / "vae"))
        tes = [CLIPTextModel(CLIPTextModel.config_class.from_pretrained(folder / "text_encoder"))]
        if family_name == "sdxl":
            cls = CLIPTextModelWithProjection
            tes.append(cls(cls.config_class.from_pretrained(folder / "text_encoder_2")))
    return LoadedModel(family(family_name), unet, vae, tes, [], None, "epsilon", str(folder))


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# SD1.5 and SDXL: as published in ../shared/arch/README.md. SD2.x 768-v: the published SD2 release
# (UNet 865,910,724; its diffusers text encoder keeps 23 of OpenCLIP ViT-H's 24 layers).
@pytest.mark.parametrize(("family", "unet", "text_encoders"), [
    ("sd1", 859_520_964, [123_060_480]),
    ("sd2", 865_910_724, [340_387_840]),
    ("sdxl", 2_567_463_684, [123_060_480, 694_659_840]),
])
def test_shipped_configs_build_with_published_parameter_counts(family: str, unet: int,
                                                               text_encoders: list[int]) -> None:
    model = _meta_model(family)
    assert _count(model.unet) == unet
    assert _count(model.vae) == 83_653_863
    assert [_count(te) for te in model.text_encoders] == text_encoders


@pytest.mark.parametrize(("family", "n_keys"), [("sd1", 1131), ("sd2", 1228), ("sdxl", 2515)])
def test_real_size_layout_converts_both_ways(family: str, n_keys: int) -> None:
    """Every real-size weight gets an original name, and diffusers' converters map it back to the same shape."""
    model = _meta_model(family)
    ldm = original_layout(model)
    assert len(ldm) == n_keys  # SD1.5's and SDXL base's published files hold 1131 and 2515 tensors
    assert detect_checkpoint_family({k: tuple(v.shape) for k, v in ldm.items()}) == family
    if family == "sd2":  # OpenCLIP ViT-H has 24 layers; the 24th (unused by SD2) is written as a copy
        assert "cond_stage_model.model.transformer.resblocks.23.attn.in_proj_weight" in ldm
        assert ldm["cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight"].shape == (3072, 1024)
    unet, vae, tes = build_components(ldm, model.family, Path(model.source))
    for a, b in zip([model.unet, model.vae, *model.text_encoders], [unet, vae, *tes], strict=True):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        assert all(sa[k].shape == sb[k].shape for k in sa)


# ---- tokenizer from the vendored BPE ---------------------------------------------------------------

def test_clip_tokenizer_from_vendored_bpe_uses_clip_ids(tmp_path: Path) -> None:
    tok = clip_tokenizer()
    assert tok("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert len(tok) == 49408 and tok.bos_token_id == 49406 and tok.eos_token_id == 49407 == tok.pad_token_id
    open_clip = folder_tokenizer(family("sdxl").arch_dir, "tokenizer_2")  # OpenCLIP pads with "!" (id 0)
    ids = open_clip("a cat", padding="max_length", max_length=77).input_ids
    assert ids[:4] == [49406, 320, 2368, 49407] and ids[4:] == [0] * 73
    assert folder_tokenizer(family("sd1").arch_dir, "tokenizer").pad_token_id == 49407
    open_clip.save_pretrained(tmp_path / "tok")  # what a diffusers folder saved from a single file holds
    from transformers import CLIPTokenizer

    reloaded = CLIPTokenizer.from_pretrained(tmp_path / "tok")
    assert reloaded("a cat", padding="max_length", max_length=77).input_ids == ids


# ---- family detection ---------------------------------------------------------------------------------

def test_family_is_detected_from_the_header_alone(sd1: tuple[LoadedModel, Path], sdxl: tuple[LoadedModel, Path],
                                                  tmp_path: Path) -> None:
    for (_, file), name in ((sd1, "sd1"), (sdxl, "sdxl")):
        truncated = tmp_path / file.name
        with open(file, "rb") as fh:  # keep the header and drop every tensor: no weight is read
            prefix = fh.read(8)
            truncated.write_bytes(prefix + fh.read(int.from_bytes(prefix, "little")))
        assert detect_checkpoint_family(read_safetensors_header(truncated)[0]) == name
    sd2 = {k: tuple(v.shape) for k, v in original_layout(_meta_model("sd2")).items()}
    assert detect_checkpoint_family(sd2) == "sd2"
    unet_only = {k: s for k, s in sd2.items() if k.startswith("model.diffusion_model.")}
    assert detect_checkpoint_family(unet_only) == "sd2"  # 1024-wide cross-attention


@pytest.mark.parametrize(("shapes", "message"), [
    ({"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": (4, 320)}, "is a LoRA, not a full model"),
    ({"encoder.down.0.block.0.conv1.weight": (1,), "decoder.conv_in.weight": (1,)}, "a VAE on its own"),
    ({"down_blocks.0.resnets.0.conv1.weight": (1,)}, "one component of a diffusers model"),
    ({"model.diffusion_model.input_blocks.0.0.weight": (320, 9, 3, 3)}, "9 input channels"),
    ({"model.diffusion_model.input_blocks.0.0.weight": (320, 4, 3, 3),
      "conditioner.embedders.0.model.ln_final.weight": (1280,)}, "SDXL refiner"),
    ({"weight": (1,)}, "a file of no model family Atelier trains"),
])
def test_files_that_are_not_supported_models_are_explained(shapes: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        detect_checkpoint_family(shapes, "x.safetensors")


def test_family_mismatch_names_the_file_and_its_family(sdxl: tuple[LoadedModel, Path], sd1: tuple[LoadedModel, Path]
                                                       ) -> None:
    _, file = sdxl
    with pytest.raises(ModelLoadError,
                       match=f"model_family = 'sd1' but {file} looks like a checkpoint of the SDXL family"):
        load_model(str(file), "sd1", torch.float32)  # load_model routes single files to load_single_file
    with pytest.raises(ModelLoadError, match="looks like a checkpoint of the SD1.x family"):
        load_single_file(sd1[1], "sd2")


# ---- .ckpt, broken and incomplete files -------------------------------------------------------------

def test_ckpt_round_trip_and_unsafe_ckpt(sd1: tuple[LoadedModel, Path], tmp_path: Path) -> None:
    model, file = sd1
    with safe_open(file, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    ckpt = tmp_path / "model.ckpt"
    torch.save({"state_dict": tensors, "global_step": 1000}, ckpt)
    loaded = load_single_file(ckpt, "auto", config_dir=model.source)
    assert_same_weights(model, loaded)

    unsafe = tmp_path / "unsafe.ckpt"  # e.g. a Lightning checkpoint with its callback objects
    torch.save({"state_dict": tensors, "callbacks": TrainingCallback()}, unsafe)
    with pytest.raises(ModelLoadError, match=r"cannot be loaded safely: .*\(\S*TrainingCallback\).*weights-only"):
        load_single_file(unsafe)
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ModelLoadError, match="cannot be read as a PyTorch checkpoint"):
        load_single_file(garbage)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(ModelLoadError, match="not a safetensors file"):
        load_single_file(bad)


def test_checkpoint_without_text_encoder_is_explained(sd1: tuple[LoadedModel, Path], tmp_path: Path) -> None:
    model, file = sd1
    with safe_open(file, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if not k.startswith("cond_stage_model.")}
    partial = tmp_path / "unet-vae.safetensors"
    save_file(tensors, partial)
    with pytest.raises(ModelLoadError, match=r"has no weights for the text encoder \(cond_stage_model.transformer"):
        load_single_file(partial, "sd1", config_dir=model.source)


def test_wrong_architecture_config_is_a_shape_error(sd1: tuple[LoadedModel, Path], tiny_sdxl_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="weights do not match the SD1.x architecture"):
        load_single_file(sd1[1], "sd1", config_dir=tiny_sdxl_dir)


# ---- prediction type -----------------------------------------------------------------------------------

def test_prediction_type_travels_with_the_file(tmp_path: Path, sdxl: tuple[LoadedModel, Path]) -> None:
    vpred_dir = build_tiny_sd1(tmp_path / "v", v_prediction=True)
    model = load_model(str(vpred_dir), "auto", torch.float32)
    [file] = save_full_model(model, tmp_path / "v-model", as_diffusers=False, dtype="float")
    with safe_open(file, "pt") as f:
        assert f.metadata()["modelspec.prediction_type"] == "v"
    assert load_single_file(file, config_dir=vpred_dir).prediction_type == "v_prediction"
    assert load_single_file(file, config_dir=vpred_dir, prediction_type="epsilon").prediction_type == "epsilon"

    xl, _ = sdxl
    xl_v = LoadedModel(xl.family, xl.unet, xl.vae, xl.text_encoders, xl.tokenizers, xl.noise_scheduler,
                       "v_prediction", xl.source)
    [file] = save_full_model(xl_v, tmp_path / "xl-v", as_diffusers=False, dtype="fp16",
                             metadata={"modelspec.prediction_type": None})  # only the v_pred key tells
    with safe_open(file, "pt") as f:
        assert "v_pred" in f.keys() and "modelspec.prediction_type" not in f.metadata()
    assert load_single_file(file, config_dir=xl.source).prediction_type == "v_prediction"


# ---- saving: precision, diffusers folder, atomic replace ---------------------------------------------

@pytest.mark.parametrize(("precision", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_save_precision(precision: str, dtype: torch.dtype, sd1: tuple[LoadedModel, Path], tmp_path: Path) -> None:
    model, _ = sd1
    [file] = save_full_model(model, tmp_path / "m", as_diffusers=False, dtype=precision)
    with safe_open(file, "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys() if not k.endswith("position_ids")}
    assert dtypes == {dtype}
    loaded = load_single_file(file, config_dir=model.source, weight_dtype=torch.float32)
    assert loaded.unet.dtype == torch.float32 and loaded.vae.dtype == torch.float32
    ref = model.unet.state_dict()["conv_in.weight"].to(dtype).float()
    assert torch.equal(loaded.unet.state_dict()["conv_in.weight"], ref)


def test_given_weights_are_saved_instead_of_the_modules(sd1: tuple[LoadedModel, Path], tmp_path: Path) -> None:
    """EMA weights, say: both outputs get them, the model keeps its own."""
    from safetensors.torch import load_file

    model, _ = sd1
    before = model.unet.conv_in.weight.detach().clone()
    ema = {k: v + 1 for k, v in model.unet.state_dict().items()}
    te = {k: v * 0 if v.is_floating_point() else v for k, v in model.text_encoders[0].state_dict().items()}
    file, folder = save_full_model(model, tmp_path / "ema", dtype="fp16", unet_state=ema, text_encoder_states=[te])
    with safe_open(file, "pt") as f:
        assert torch.equal(f.get_tensor("model.diffusion_model.input_blocks.0.0.weight"), (before + 1).half())
        assert not f.get_tensor("cond_stage_model.transformer.text_model.final_layer_norm.weight").any()
    unet = load_file(folder / "unet" / "diffusion_pytorch_model.safetensors")
    assert torch.equal(unet["conv_in.weight"], (before + 1).half())
    vae = load_file(folder / "vae" / "diffusion_pytorch_model.safetensors")
    assert {v.dtype for v in vae.values()} == {torch.float32}  # the VAE keeps its precision in a folder
    assert torch.equal(model.unet.conv_in.weight, before)


def test_diffusers_folder_from_a_single_file_loads_and_replaces_atomically(
        sdxl: tuple[LoadedModel, Path], tmp_path: Path) -> None:
    model, file = sdxl
    loaded = load_single_file(file, config_dir=model.source)
    out = tmp_path / "out" / "my-model"
    written = save_full_model(loaded, out, as_diffusers=True, as_single_file=True, dtype=torch.float32)
    assert written == [out.with_name("my-model.safetensors"), out]
    index = json.loads((out / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionXLPipeline"
    assert index["text_encoder_2"] == ["transformers", "CLIPTextModelWithProjection"]
    assert {p.name for p in out.iterdir()} >= {"unet", "vae", "text_encoder", "text_encoder_2", "tokenizer",
                                               "tokenizer_2", "scheduler", "model_index.json"}
    weights = out / "unet" / "diffusion_pytorch_model.safetensors"
    assert stat.S_IMODE(weights.stat().st_mode) == 0o666 & ~_umask()
    again = load_model(str(out), "auto", torch.float32)
    assert_same_weights(model, again)
    assert again.tokenizers[1]("a cat").input_ids == model.tokenizers[1]("a cat").input_ids

    (out / "stale.txt").write_text("from the previous save")
    save_full_model(loaded, out, as_diffusers=True, as_single_file=False)  # replaces the old folder whole
    assert not (out / "stale.txt").exists() and (out / "model_index.json").exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temp folders left
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a diffusers model folder"):
        save_full_model(loaded, precious, as_diffusers=True, as_single_file=False)
    assert (precious / "notes.txt").read_text() == "mine"


class TrainingCallback:
    """An arbitrary Python object inside a .ckpt: unpickling it would need the unsafe loader."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_folder_saved_from_bf16_training_loads_without_torch_dtype(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    import torch
    from diffusers import StableDiffusionPipeline

    from trainers.models import load_model
    from trainers.models.single_file import save_full_model

    model = load_model(str(tiny_sd1_dir), "auto", torch.bfloat16)
    save_full_model(model, tmp_path / "ft", as_diffusers=True, as_single_file=False, dtype="bf16")
    pipe = StableDiffusionPipeline.from_pretrained(tmp_path / "ft")
    pipe("a", num_inference_steps=1, height=64, width=64, output_type="np")
