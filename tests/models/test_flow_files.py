"""SD3 and FLUX.1 as sd-scripts' users have them: the denoiser in its reference layout (flux1-dev.safetensors,
sd3.5_large.safetensors) with clip_l, clip_g, t5xxl and ae files, or one all-in-one file. Each layout is checked
against diffusers' own converter; a tiny model read from such files is the same model as its diffusers folder."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from trainers.core.errors import ConfigIssue
from trainers.models import ModelFiles, ModelLoadError, load_model
from trainers.models.checks import model_issues
from trainers.models.flux import reference
from trainers.models.flux.tiny import build_tiny_flux
from trainers.models.sd3.tiny import build_tiny_sd3
from trainers.models.tiny_flow import write_reference_files

FLUX_DEV = {"patch_size": 1, "in_channels": 64, "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 128,
            "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768,
            "guidance_embeds": True, "axes_dims_rope": (16, 56, 56)}


@pytest.fixture(scope="module")
def flux_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("flux files")
    folder = build_tiny_flux(root / "diffusers", reference_heads=True)
    return folder, write_reference_files(folder, root / "sd-scripts files")


@pytest.fixture(scope="module")
def sd3_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("sd3 files")
    folder = build_tiny_sd3(root / "diffusers", reference_heads=True)
    return folder, write_reference_files(folder, root / "sd-scripts files")


def _options(files: dict[str, Path], **changes: object) -> dict[str, str]:
    return {k: str(v) for k, v in {**files, **changes}.items()}


def test_reference_layout_matches_diffusers_converter_at_real_widths() -> None:
    """Every tensor of FLUX.1-dev's blocks (one of each kind, real widths) maps to the same diffusers tensor, with
    the same values, as diffusers' own single-file converter maps it (its column count is cut to 2)."""
    from accelerate import init_empty_weights
    from diffusers import FluxTransformer2DModel
    from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers

    with init_empty_weights():
        model = FluxTransformer2DModel.from_config(FLUX_DEV)
    shapes = {k: tuple(v.shape) for k, v in reference.to_reference(model.state_dict(), model.config).items()}
    assert reference.config_from_shapes(shapes, "flux1-dev") == {**FLUX_DEV, "out_channels": None}
    generator = torch.Generator().manual_seed(0)
    state = {k: torch.randn((s[0], 2) if len(s) > 1 else s, generator=generator) for k, s in shapes.items()}
    theirs = convert_flux_transformer_checkpoint_to_diffusers({"model.diffusion_model." + k: v
                                                               for k, v in state.items()})
    ours = reference.to_diffusers(state, FLUX_DEV, "flux1-dev")
    assert set(ours) == set(theirs) == set(model.state_dict())
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key
    back = reference.to_reference(ours, FLUX_DEV)
    assert all(torch.equal(back[k], v) for k, v in state.items())


def test_sd3_reference_layout_matches_diffusers_converter(sd3_files: tuple[Path, dict[str, Path]]) -> None:
    """The tiny SD3.5-medium-like MMDiT (extra self-attention, q/k norms, a context-pre-only last block) written in
    the reference layout reads back through diffusers' own converter as the same weights; SD3 Medium's and
    SD3.5 Large's real-size layouts have the key names and shapes diffusers' converter maps."""
    from accelerate import init_empty_weights
    from diffusers import SD3Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers

    from trainers.models.sd3 import reference

    folder, files = sd3_files
    model = SD3Transformer2DModel.from_pretrained(folder, subfolder="transformer")
    written = reference.strip_prefix(load_file(files["pretrained_model_name_or_path"]))
    theirs = convert_sd3_transformer_checkpoint_to_diffusers(
        {k: v for k, v in written.items() if not k.startswith(("first_stage_model.", "text_encoders."))})
    assert set(theirs) == set(model.state_dict())
    assert all(torch.equal(theirs[k], v) for k, v in model.state_dict().items())
    for size in ({"num_layers": 24, "attention_head_dim": 64, "num_attention_heads": 24, "caption_projection_dim": 1536,
                  "pos_embed_max_size": 192},  # SD3 Medium
                 {"num_layers": 38, "attention_head_dim": 64, "num_attention_heads": 38, "caption_projection_dim": 2432,
                  "pos_embed_max_size": 192, "qk_norm": "rms_norm"}):  # SD3.5 Large
        with init_empty_weights():
            real = SD3Transformer2DModel(**size)
        shapes = {k: tuple(v.shape) for k, v in reference.to_reference(real.state_dict(), real.config).items()}
        config = reference.config_from_shapes(shapes, "sd3")
        assert {k: config[k] for k in size} == size
        meta = {k: torch.empty(s, device="meta") for k, s in shapes.items()}
        assert set(convert_sd3_transformer_checkpoint_to_diffusers(dict(meta))) == set(real.state_dict())


@pytest.mark.parametrize("which", ["flux_files", "sd3_files"])
def test_files_load_as_the_same_model_as_the_diffusers_folder(which: str, request: pytest.FixtureRequest) -> None:
    folder, files = request.getfixturevalue(which)
    options = _options(files)
    from_files = load_model(options.pop("pretrained_model_name_or_path"), "auto", torch.float32,
                            files=ModelFiles.from_values(options))
    from_folder = load_model(str(folder), "auto", torch.float32)
    assert from_files.family.name == from_folder.family.name == which.split("_")[0]
    assert from_files.family.modelspec_architecture == from_folder.family.modelspec_architecture
    hidden, pooled = from_files.encode_texts(["sks shape, a red circle"], 1)
    expected_hidden, expected_pooled = from_folder.encode_texts(["sks shape, a red circle"], 1)
    assert torch.allclose(hidden, expected_hidden, atol=1e-6) and torch.allclose(pooled, expected_pooled, atol=1e-6)
    channels = from_folder.vae.config.latent_channels
    noisy = torch.randn(1, channels, 8, 8, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([500.0])
    with torch.no_grad():
        got = from_files.family.denoise(from_files.unet, noisy, t, hidden, pooled, None)
        want = from_folder.family.denoise(from_folder.unet, noisy, t, hidden, pooled, None)
        assert torch.allclose(got, want, atol=1e-5)
        pixels = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(2)) * 2 - 1
        latents = from_files.vae.encode(pixels).latent_dist.mean
        assert torch.allclose(latents, from_folder.vae.encode(pixels).latent_dist.mean, atol=1e-5)
        assert torch.allclose(from_files.vae.decode(latents).sample, from_folder.vae.decode(latents).sample,
                              atol=1e-5)
    assert from_files.vae.config.scaling_factor == from_folder.vae.config.scaling_factor
    assert from_files.vae.config.shift_factor == from_folder.vae.config.shift_factor


def test_an_all_in_one_file_needs_no_component_files(flux_files: tuple[Path, dict[str, Path]],
                                                     tmp_path: Path) -> None:
    """ComfyUI's all-in-one layout: the transformer under model.diffusion_model., the text encoders and the VAE
    beside it."""
    folder, files = flux_files
    whole = {"model.diffusion_model." + k: v for k, v in load_file(files["pretrained_model_name_or_path"]).items()}
    for prefix, option in (("text_encoders.clip_l.transformer.", "clip_l"), ("text_encoders.t5xxl.transformer.",
                                                                              "t5xxl"), ("vae.", "ae")):
        whole.update({prefix + k: v for k, v in load_file(files[option]).items()})
    save_file(whole, tmp_path / "flux1-all.safetensors")
    assert model_issues({"pretrained_model_name_or_path": str(tmp_path / "flux1-all.safetensors")}) == []
    model = load_model(str(tmp_path / "flux1-all.safetensors"), "auto", torch.float32,
                       files=ModelFiles(tokenizer_cache_dir=str(files["tokenizer_cache_dir"])))
    expected = load_model(str(folder), "auto", torch.float32)
    assert torch.allclose(model.encode_texts(["a cat"], 1)[0], expected.encode_texts(["a cat"], 1)[0], atol=1e-6)


def test_missing_component_files_are_named_before_anything_loads(flux_files: tuple[Path, dict[str, Path]]) -> None:
    _, files = flux_files
    options = _options(files, t5xxl="", ae="")
    issues = model_issues(options)
    assert [i.field for i in issues] == ["t5xxl", "ae"]
    assert all(isinstance(i, ConfigIssue) and "flux.safetensors holds the FLUX.1 denoiser" in i.message for i in issues)
    with pytest.raises(ModelLoadError, match="t5xxl"):
        load_model(options.pop("pretrained_model_name_or_path"), "auto", torch.float32,
                   files=ModelFiles.from_values(options))


def test_sd3_files_name_what_they_lack_and_what_they_do_not_read(sd3_files: tuple[Path, dict[str, Path]],
                                                                 tmp_path: Path) -> None:
    _, files = sd3_files
    options = _options(files, clip_g="", ae=str(files["clip_l"]))
    issues = model_issues(options)
    assert [i.field for i in issues] == ["clip_g", "ae"]
    assert "no CLIP-G text encoder: set clip_g" in issues[0].message and "is not read with" in issues[1].message
    no_vae = {k: v for k, v in load_file(files["pretrained_model_name_or_path"]).items()
              if not k.startswith("first_stage_model.")}
    save_file(no_vae, tmp_path / "sd3-no-vae.safetensors")
    no_vae_file = str(tmp_path / "sd3-no-vae.safetensors")
    issues = model_issues({**_options(files), "pretrained_model_name_or_path": no_vae_file})
    assert [i.field for i in issues] == ["vae"] and "diffusers AutoencoderKL folder" in issues[0].message


def test_a_component_file_of_the_wrong_kind_is_named(flux_files: tuple[Path, dict[str, Path]]) -> None:
    _, files = flux_files
    options = _options(files, t5xxl=files["clip_l"])  # a CLIP file where the T5 file belongs
    assert [(i.field, "holds a CLIP text encoder" in i.message) for i in model_issues(options)] == [("t5xxl", True)]
    with pytest.raises(ModelLoadError, match="t5xxl"):
        load_model(options.pop("pretrained_model_name_or_path"), "auto", torch.float32,
                   files=ModelFiles.from_values(options))


def test_the_t5_tokenizer_is_asked_for_when_it_is_nowhere(flux_files: tuple[Path, dict[str, Path]],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _, files = flux_files
    options = _options(files, tokenizer_cache_dir=tmp_path / "empty cache")
    with pytest.raises(ModelLoadError, match="tokenizer_cache_dir"):
        load_model(options.pop("pretrained_model_name_or_path"), "auto", torch.float32,
                   files=ModelFiles.from_values(options))


@pytest.mark.slow
def test_an_sd_scripts_flux_toml_trains_a_lora_from_the_files(flux_files: tuple[Path, dict[str, Path]],
                                                             tmp_path: Path) -> None:
    """flux_train_network.py's config as its users write it, pointing at the files and choosing layers and ranks
    in network_args, trains a LoRA that diffusers' FLUX pipeline of the same model loads and that changes its
    image."""
    from diffusers import FluxPipeline
    from helpers import events, run_trainer

    from trainers.demo import build_dataset
    from trainers.methods.lora.file_format import read_lora_file

    folder, files = flux_files
    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    paths = "\n".join(f'{k} = "{v.as_posix()}"' for k, v in files.items())
    config = tmp_path / "flux_lora.toml"
    config.write_text(f'''{paths}
train_data_dir = "{data.as_posix()}"
output_dir = "{(tmp_path / 'out').as_posix()}"
output_name = "flux-lora"
network_module = "networks.lora_flux"
network_dim = 4
network_alpha = 2
network_train_unet_only = true
network_args = ["img_attn_dim=8", "train_single_block_indices=none"]
learning_rate = 1e-2
optimizer_type = "AdamW"
resolution = "64"
train_batch_size = 2
max_train_steps = 2
max_data_loader_n_workers = 0
timestep_sampling = "shift"
discrete_flow_shift = 3.1582
model_prediction_type = "raw"
guidance_scale = 1.0
text_encoder_max_tokens = 64
cache_text_encoder_outputs = true
''', encoding="utf-8")
    result = run_trainer(["--config", str(config)], tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [e["step"] for e in events(tmp_path / "run") if e["type"] == "progress"] == [1, 2]
    state, meta = read_lora_file(tmp_path / "out" / "flux-lora.safetensors")
    assert state["lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight"].shape == (3 * 128, 8)  # img_attn_dim
    assert state["lora_unet_double_blocks_0_txt_attn_qkv.lora_up.weight"].shape == (3 * 128, 4)
    assert not any(k.startswith("lora_unet_single_blocks") for k in state)  # train_single_block_indices=none
    assert json.loads(meta["ss_network_args"]) == {"img_attn_dim": "8", "train_single_block_indices": "none"}
    assert meta["ss_base_model_version"] == "flux1" and meta["ss_network_module"] == "networks.lora_flux"

    def render(pipe: FluxPipeline) -> torch.Tensor:
        return pipe("sks shape, red circle", num_inference_steps=2, height=64, width=64, output_type="pt",
                    max_sequence_length=64, generator=torch.Generator().manual_seed(0)).images

    base = render(FluxPipeline.from_pretrained(folder))
    pipe = FluxPipeline.from_pretrained(folder)
    model = load_model(str(folder), "auto", torch.float32)
    pipe.load_lora_weights(model.family.lora_for_pipeline(state, model))
    assert (render(pipe) - base).abs().max() > 1e-4

    # Generate's compare form takes the run's model with its files, and renders with and without the LoRA.
    import numpy as np
    from PIL import Image

    from trainers.generate.options import GenerateConfig, LoraRef, fill_from_run
    from trainers.generate.plan import Variant, build_plan
    from trainers.generate.renderer import Renderer

    cfg = fill_from_run(GenerateConfig({"mode": "compare", "compare_run": str(tmp_path / "run")}))
    assert cfg.model == str(files["pretrained_model_name_or_path"]) and cfg.t5xxl == str(files["t5xxl"])
    cfg = cfg.replace(mode="generate", compare_run="", prompts=["sks shape, red circle --s 2"], width=64, height=64,
                      devices="cpu", cpu_threads=1)
    variants = [Variant("base"), Variant("lora", (LoraRef(str(tmp_path / "out" / "flux-lora.safetensors"), 1.0),))]
    renderer = Renderer(cfg, "cpu", variants)
    without, with_lora = (np.asarray(Image.open(renderer.render(item)[0]).convert("RGB")).astype(int)
                          for item in build_plan(cfg, tmp_path / "images", 7, variants).items)
    assert np.abs(with_lora - without).max() > 0


def test_flux_network_args_choose_layers_and_ranks_as_sd_scripts() -> None:
    from trainers.models.flux.lora_layers import layer_dims

    names = ["lora_unet_double_blocks_0_img_attn_qkv", "lora_unet_double_blocks_1_txt_mlp_0",
             "lora_unet_double_blocks_2_img_mod_lin", "lora_unet_single_blocks_0_linear1",
             "lora_unet_single_blocks_1_modulation_lin", "lora_unet_single_blocks_3_linear2"]
    blocks = {"double": 3, "single": 4}
    assert set(layer_dims(names, {}, 4, blocks).values()) == {4}
    assert layer_dims(names, {"train_blocks": "single"}, 4, blocks) == {
        names[0]: 0, names[1]: 0, names[2]: 0, names[3]: 4, names[4]: 4, names[5]: 4}
    dims = layer_dims(names, {"img_attn_dim": "8", "txt_mlp_dim": "0", "single_mod_dim": "2",
                              "train_single_block_indices": "0,2-3"}, 4, blocks)
    assert dims == {names[0]: 8, names[1]: 0, names[2]: 4, names[3]: 4, names[4]: 0, names[5]: 4}
    with pytest.raises(ValueError, match="train_double_block_indices='0-5'.*blocks 0 to 2"):
        layer_dims(names, {"train_double_block_indices": "0-5"}, 4, blocks)
    with pytest.raises(ValueError, match="train_blocks='some'"):
        layer_dims(names, {"train_blocks": "some"}, 4, blocks)


def test_flux_in_dims_rank_the_input_layers_which_train_only_with_it() -> None:
    from trainers.models.flux.lora_layers import layer_dims

    names = ["lora_unet_img_in", "lora_unet_time_in_in_layer", "lora_unet_time_in_out_layer",
             "lora_unet_guidance_in_out_layer", "lora_unet_txt_in", "lora_unet_single_blocks_0_linear2"]
    blocks = {"double": 1, "single": 1}
    assert layer_dims(names, {}, 4, blocks) == {**dict.fromkeys(names[:5], 0), names[5]: 4}
    dims = layer_dims(names, {"in_dims": "[8,0,0,2,4]", "train_blocks": "double"}, 4, blocks)
    assert dims == {names[0]: 8, names[1]: 0, names[2]: 0, names[3]: 2, names[4]: 4, names[5]: 0}
    assert layer_dims(names, {"in_dims": "8,0,0,2,4"}, 4, blocks)[names[0]] == 8  # brackets optional, as sd-scripts
    for bad in ("[4,0,0,4]", "[4,0,x,0,4]", "[4,0,-1,0,4]"):
        with pytest.raises(ValueError, match=r"in_dims=.*five ranks .*img, time, vector, guidance and txt"):
            layer_dims(names, {"in_dims": bad}, 4, blocks)


def test_flux_layer_args_are_refused_for_other_families_and_checked_for_flux() -> None:
    from trainers.models import family

    args = {"network_args": ["train_blocks=single"]}
    assert [i.field for i in family("sdxl").option_issues(args)] == ["network_args"]
    assert [i.field for i in family("sd3").option_issues(args)] == ["network_args"]
    assert family("flux").option_issues(args) == []
    bad = family("flux").option_issues({"network_args": ["img_attn_dim=eight"]})
    assert len(bad) == 1 and "img_attn_dim='eight' is not a whole number" in bad[0].message
    assert [i.field for i in family("sdxl").option_issues({"save_diffusers_lora": True})] == ["save_diffusers_lora"]
    assert family("sd3").option_issues({"save_diffusers_lora": True}) == []


@pytest.mark.slow
@pytest.mark.parametrize(("which", "key"), [
    ("flux_files", "double_blocks.0.img_attn.qkv.weight"),
    ("sd3_files", "model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight")])
def test_a_finetune_from_the_files_saves_both_layouts(which: str, key: str, request: pytest.FixtureRequest,
                                                     tmp_path: Path) -> None:
    """save_model_as = 'both': the denoiser in its reference layout, as sd-scripts' flux_train.py / sd3_train.py
    write it (for ComfyUI's and Forge's loaders; SD3's with its VAE), and a whole diffusers folder, from files."""
    import diffusers
    from helpers import train
    from safetensors import safe_open

    from trainers.demo import build_dataset

    folder, files = request.getfixturevalue(which)
    options = _options(files)
    out = tmp_path / "out"
    assert train("finetune", tmp_path / "run", **options, train_data_dir=str(build_dataset(tmp_path / "data")),
                 output_dir=str(out), output_name="ft", save_model_as="both", save_precision="float",
                 max_train_steps=2, resolution="64", train_batch_size=2, max_data_loader_n_workers=0,
                 learning_rate=1e-3, text_encoder_max_tokens=32) == 0
    base = load_model(str(folder), "auto", torch.float32)
    with safe_open(out / "ft.safetensors", "pt") as f:
        meta = f.metadata()
        assert key in set(f.keys())
    assert meta["modelspec.architecture"] == base.family.modelspec_architecture
    assert "modelspec.prediction_type" not in meta
    trained = load_model(str(out / "ft.safetensors"), "auto", torch.float32,
                         files=ModelFiles.from_values({k: v for k, v in options.items()
                                                       if k != "pretrained_model_name_or_path"}))
    saved_folder = load_model(str(out / "ft"), "auto", torch.float32)
    for name, weight in saved_folder.unet.state_dict().items():
        assert torch.equal(trained.unet.state_dict()[name], weight), name
    assert any(not torch.equal(w, base.unet.state_dict()[n]) for n, w in saved_folder.unet.state_dict().items())
    pipe = getattr(diffusers, base.family.pipeline_class).from_pretrained(out / "ft")
    assert pipe("a cat", num_inference_steps=1, height=64, width=64, max_sequence_length=32,
                output_type="pt").images.shape == (1, 3, 64, 64)


@pytest.mark.slow
def test_an_sd3_lora_trains_from_the_files_and_loads_in_diffusers(sd3_files: tuple[Path, dict[str, Path]],
                                                                  tmp_path: Path) -> None:
    """diffusers does not read kohya SD3 LoRA files: save_diffusers_lora also writes the folder its
    load_lora_weights reads, which renders the LoRA."""
    from diffusers import StableDiffusion3Pipeline
    from helpers import events, train

    from trainers.demo import build_dataset
    from trainers.methods.lora.file_format import read_lora_file

    folder, files = sd3_files
    assert train("lora", tmp_path / "run", **_options(files), train_data_dir=str(build_dataset(tmp_path / "data")),
                 output_dir=str(tmp_path / "out"), max_train_steps=2, resolution="64", train_batch_size=2,
                 max_data_loader_n_workers=0, learning_rate=1e-2, network_dim=4, text_encoder_max_tokens=32,
                 network_train_unet_only=True, cache_text_encoder_outputs=True, save_diffusers_lora=True,
                 save_precision="float", sample_prompt_lines=["sks shape --w 64 --h 64 --s 2"],
                 sample_every_n_steps=2) == 0
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).is_file()
    state, meta = read_lora_file(tmp_path / "out" / "lora.safetensors")
    assert "lora_unet_joint_blocks_0_x_block_attn_qkv.lora_up.weight" in state
    assert meta["ss_base_model_version"] == "5-medium" and meta["ss_network_module"] == "networks.lora_sd3"

    def render(pipe: StableDiffusion3Pipeline) -> torch.Tensor:
        return pipe("sks shape", num_inference_steps=2, height=64, width=64, max_sequence_length=32,
                    output_type="pt", generator=torch.Generator().manual_seed(0)).images

    base = render(StableDiffusion3Pipeline.from_pretrained(folder))
    from_folder = StableDiffusion3Pipeline.from_pretrained(folder)
    from_folder.load_lora_weights(tmp_path / "out" / "lora-diffusers")
    model = load_model(str(folder), "auto", torch.float32)
    from_kohya = StableDiffusion3Pipeline.from_pretrained(folder)
    from_kohya.load_lora_weights(model.family.lora_for_pipeline(state, model))
    with_lora = render(from_folder)
    assert (with_lora - base).abs().max() > 1e-4 and torch.allclose(with_lora, render(from_kohya), atol=1e-6)


@pytest.mark.slow
def test_blocks_to_swap_trains_the_same_lora_and_is_checked(tmp_path: Path) -> None:
    """blocks_to_swap moves weights, never numbers: on the CPU (device and offload the same) the LoRA is the one
    trained without it, and every swapped block ran with its weights fetched. Too many blocks, no gradient
    checkpointing, or an SD model are refused by name."""
    from helpers import train

    from trainers.core.options import TrainConfig
    from trainers.demo import build_dataset
    from trainers.models import family
    from trainers.methods.lora.file_format import read_lora_file
    from trainers.models import block_swap
    from trainers.preflight.validate import validate

    folder = build_tiny_flux(tmp_path / "flux", blocks=(4, 6))
    data = build_dataset(tmp_path / "data")
    common = {"pretrained_model_name_or_path": str(folder), "train_data_dir": str(data), "resolution": "64",
              "max_train_steps": 2, "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "text_encoder_max_tokens": 32, "gradient_checkpointing": True, "seed": 3}
    moves: list[int] = []
    real_init = block_swap.BlockSwap.__init__

    def counted(self: block_swap.BlockSwap, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)
        moves.append(len(self.parked))
    block_swap.BlockSwap.__init__ = counted  # type: ignore[method-assign]
    try:
        assert train("lora", tmp_path / "swap", **common, output_dir=str(tmp_path / "swap-out"), blocks_to_swap=3) == 0
    finally:
        block_swap.BlockSwap.__init__ = real_init  # type: ignore[method-assign]
    assert moves == [1 + 4]  # as sd-scripts counts: 3 // 2 = 1 double block, (3 - 1) x 2 = 4 single blocks
    assert train("lora", tmp_path / "plain", **common, output_dir=str(tmp_path / "plain-out")) == 0
    swapped, _ = read_lora_file(tmp_path / "swap-out" / "lora.safetensors")
    plain, _ = read_lora_file(tmp_path / "plain-out" / "lora.safetensors")
    assert swapped.keys() == plain.keys() and all(torch.equal(swapped[k], plain[k]) for k in plain)

    issues = validate(TrainConfig("lora", {**common, "gradient_checkpointing": False, "blocks_to_swap": 2,
                                          "output_dir": str(tmp_path / "x")}),
                      check_paths=False)
    assert [i.field for i in issues] == ["blocks_to_swap"]
    assert not family("sd1").option_issues({"blocks_to_swap": 2})  # a UNet swaps its down, mid and up blocks
    assert train("lora", tmp_path / "too many", **common, output_dir=str(tmp_path / "x"), blocks_to_swap=9) != 0
    said = (tmp_path / "too many" / "events.jsonl").read_text(encoding="utf-8")
    assert "blocks_to_swap" in said and "at most 2 of them" in said, said[-1500:]


def test_split_qkv_is_for_families_with_fused_qkv_modules() -> None:
    from trainers.models import family

    args = {"network_args": ["split_qkv=True"]}
    assert family("flux").option_issues(args) == [] and family("sd3").option_issues(args) == []
    refused = family("sdxl").option_issues(args)
    assert [i.field for i in refused] == ["network_args"] and "split_qkv splits LoRA modules" in refused[0].message
