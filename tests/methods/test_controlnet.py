"""ControlNet training: control images from conditioning_data_dir, a frozen UNet, a ControlNet that loads in
diffusers and whose output depends on the control image."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from trainers.core.options import load_config
from trainers.demo import build_dataset
from trainers.preflight.validate import validate

from helpers import FAST, events, run_trainer, sets

CN_FAST = [kv for kv in FAST if not kv.startswith("network_")]


def controls_for(dataset: Path, root: Path, skip: int = 0) -> Path:
    """A control image (the inverted grey image) for each training image, in the same subfolders; the first
    `skip` of each subfolder left out."""
    for folder in (p for p in dataset.iterdir() if p.is_dir()):
        (root / folder.name).mkdir(parents=True, exist_ok=True)
        for image in sorted(folder.glob("*.png"))[skip:]:
            ImageOps.invert(Image.open(image).convert("L")).convert("RGB").save(root / folder.name / image.name)
    return root


def tiny_data(tmp_path: Path) -> dict[str, object]:
    """A 64 px dataset with a control image for each training image, as a run's options."""
    dataset = build_dataset(tmp_path / "data", folder="1_sks shape", size=64)
    return {"train_data_dir": str(dataset), "conditioning_data_dir": str(controls_for(dataset, tmp_path / "controls")),
            "resolution": "64", "max_data_loader_n_workers": 0}


def cn_args(model: Path, dataset: Path, controls: Path, out: Path, **values: object) -> list[str]:
    return [*sets(pretrained_model_name_or_path=str(model), train_data_dir=str(dataset),
                  conditioning_data_dir=str(controls), output_dir=str(out), **values),
            *[a for kv in CN_FAST for a in ("--set", kv)]]


def test_training_images_without_a_control_image_are_named_before_training(tiny_sd1_dir: Path,
                                                                           tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    controls = controls_for(dataset, tmp_path / "controls", skip=2)
    cfg = load_config("controlnet", overrides=[f'pretrained_model_name_or_path="{tiny_sd1_dir}"',
                                               f'train_data_dir="{dataset}"', f'conditioning_data_dir="{controls}"'])
    found = {i.field: i.message for i in validate(cfg, check_paths=False)}
    message = found["conditioning_data_dir"]
    assert "no control image for 2 training image(s)" in message
    assert "1_sks shape/000_red_circle.png" in message or "1_sks shape/000_" in message
    assert "masked_loss" not in message

    prompts = load_config("controlnet", overrides=[f'pretrained_model_name_or_path="{tiny_sd1_dir}"',
                                                   f'train_data_dir="{dataset}"', f'conditioning_data_dir="{controls}"',
                                                   'sample_prompt_lines=["a shape --cn nowhere.png"]'])
    found = {i.field: i.message for i in validate(prompts, check_paths=False)}
    assert "--cn 'nowhere.png' is not an image file" in found["sample_prompt_lines"]

    no_dir = load_config("controlnet", overrides=[f'pretrained_model_name_or_path="{tiny_sd1_dir}"',
                                                  f'train_data_dir="{dataset}"'])
    assert "is needed" in {i.field: i.message for i in validate(no_dir, check_paths=False)}["conditioning_data_dir"]

    flux_sized = load_config("controlnet", overrides=[f'pretrained_model_name_or_path="{tiny_sd1_dir}"',
                                                      f'train_data_dir="{dataset}"', "num_double_layers=2"])
    assert "sizes a FLUX.1 ControlNet" in {i.field: i.message for i in validate(flux_sized, check_paths=False)}[
        "num_double_layers"]


@pytest.mark.slow
def test_sd1_controlnet_trains_saves_and_its_residuals_follow_the_control_image(tiny_sd1_dir: Path,
                                                                                 tmp_path: Path) -> None:
    from diffusers import ControlNetModel, UNet2DConditionModel
    from safetensors.torch import load_file

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    controls = controls_for(dataset, tmp_path / "controls")
    out, run_dir = tmp_path / "out", tmp_path / "run"
    control = next((controls / "1_sks shape").iterdir())
    result = run_trainer(cn_args(tiny_sd1_dir, dataset, controls, out, max_train_steps=2, flip_aug=True,
                                 random_crop=True, sample_every_n_steps=2,
                                 sample_prompt_lines=[f"sks shape --s 2 --cn {control}", "sks shape --s 2"]),
                         run_dir, method="controlnet")
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(run_dir)
    assert evs[-1]["type"] == "done" and [e["index"] for e in evs if e["type"] == "sample"] == [0, 1]

    controlnet = ControlNetModel.from_pretrained(str(out / "controlnet"))
    single = load_file(str(out / "controlnet.safetensors"))
    assert set(single) == set(controlnet.state_dict()) and "controlnet_cond_embedding.conv_in.weight" in single
    unet = UNet2DConditionModel.from_pretrained(str(tiny_sd1_dir), subfolder="unet")
    before = ControlNetModel.from_unet(unet)
    trained = [k for k, v in controlnet.state_dict().items() if not torch.equal(v, before.state_dict()[k])]
    assert any(k.startswith("controlnet_down_blocks") for k in trained)  # the zero convolutions moved

    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(1, unet.config.in_channels, 8, 8, generator=gen)
    text = torch.randn(1, 77, unet.config.cross_attention_dim, generator=gen)
    size = 8 * 2 ** (len(controlnet.config.conditioning_embedding_out_channels) - 1)  # the VAE's scale
    black, white = torch.zeros(1, 3, size, size), torch.ones(1, 3, size, size)
    with torch.no_grad():
        down_black, _ = controlnet(latents, 10, text, controlnet_cond=black, return_dict=False)
        down_white, _ = controlnet(latents, 10, text, controlnet_cond=white, return_dict=False)
    assert any(not torch.allclose(a, b) for a, b in zip(down_black, down_white))


def test_a_sample_with_a_control_image_goes_through_the_controlnet(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from diffusers import ControlNetModel

    from trainers.core.prompts import parse_prompt_lines
    from trainers.methods.controlnet.controlled import ControlledUNet
    from trainers.methods.controlnet.trainer import ControlSamples
    from trainers.models import load_model
    from trainers.sampling.pipeline import generate_samples

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    unet = model.unet
    halvings = len(model.vae.config.block_out_channels) - 1
    controlnet = ControlNetModel.from_unet(unet, conditioning_embedding_out_channels=(16, 32, 96, 256)[:halvings + 1])
    with torch.no_grad():  # a trained ControlNet's zero convolutions are no longer zero
        for p in [*controlnet.controlnet_down_blocks.parameters(), *controlnet.controlnet_mid_block.parameters()]:
            p.normal_(std=0.5, generator=torch.Generator().manual_seed(1))
    hook = ControlSamples(model, ControlledUNet(unet, controlnet, 1.0))
    Image.new("RGB", (40, 40), "white").save(tmp_path / "white.png")
    prompts = parse_prompt_lines(["a shape --s 2 --d 3", f"a shape --s 2 --d 3 --cn {tmp_path / 'white.png'}"])

    def render(folder: str, per_prompt: object = None) -> list[np.ndarray]:
        files = generate_samples(model, prompts, tmp_path / folder, "s", default_size=(32, 32), per_prompt=per_prompt)
        return [np.asarray(Image.open(f), dtype=np.int16) for f in files]

    plain, _ = render("base")
    with hook.sampling_weights():
        without, controlled = render("controlnet", hook.sampling_prompt)
    assert model.unet is unet  # the UNet is the model's own again after sampling
    assert np.array_equal(without, plain)  # no --cn: the ControlNet takes no part
    assert np.abs(controlled - plain).max() > 0


def test_the_kohya_export_runs_sd_scripts_controlnet_script_with_the_control_images() -> None:
    from trainers.adapters.kohya.export import sd_scripts_command

    argv, text, _ = sd_scripts_command(load_config("controlnet", overrides=[
        "conditioning_data_dir='/data/edges'", "controlnet_model_name_or_path='/models/cn'", "conditioning_scale=0.5",
        "max_train_steps=5"]), family="sdxl")
    assert "sdxl_train_control_net.py" in argv
    assert 'conditioning_data_dir = "/data/edges"' in text and 'controlnet_model_name_or_path = "/models/cn"' in text
    assert "conditioning_scale" not in text  # an option of ours that sd-scripts does not have


def test_each_control_image_is_resized_cropped_and_flipped_as_its_training_image(tmp_path: Path) -> None:
    from trainers.data.catalog import build_catalog
    from trainers.data.dataset import CaptionedImages, flip_of
    from trainers.data.control_images import ControlImages

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")  # 96 px wide, 96-128 px high
    controls = tmp_path / "controls" / "1_sks shape"
    controls.mkdir(parents=True)
    for image in (dataset / "1_sks shape").glob("*.png"):  # each image is its own control image
        Image.open(image).save(controls / image.name)
    cfg = load_config("controlnet", overrides=[f'train_data_dir="{dataset}"', 'resolution="64"', "flip_aug=true",
                                               "random_crop=true", "enable_bucket=false", "seed=5"])
    catalog = build_catalog(cfg.values, [])
    samples = CaptionedImages(catalog, lambda captions: [torch.zeros(len(captions), 4)], seed=cfg.seed)
    control = ControlImages(catalog, tmp_path / "controls", cfg.seed)
    keys = [(epoch, index) for epoch in range(3) for index in range(len(samples))]
    for epoch, index in keys:
        pixels = samples[(epoch, index, False)]["pixels"]
        assert torch.allclose(control(torch.tensor([[epoch, index]]))[0], (pixels + 1) / 2, atol=1e-6)
    assert {flip_of(True, cfg.seed, epoch, index)[0] for epoch, index in keys} == {True, False}  # both were drawn


@pytest.mark.slow
def test_flux_controlnet_trains_from_the_transformer_samples_and_loads_in_flux_controlnet_pipeline(
        tiny_flux_dir: Path, tmp_path: Path) -> None:
    from diffusers import FluxControlNetModel, FluxControlNetPipeline

    from helpers import train

    data = tiny_data(tmp_path)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    control = next(Path(str(data["conditioning_data_dir"])).rglob("*.png"))
    assert train("controlnet", run_dir, pretrained_model_name_or_path=str(tiny_flux_dir), output_dir=str(out),
                 max_train_steps=2, train_batch_size=2, learning_rate=1e-2, num_double_layers=1, num_single_layers=1,
                 t5xxl_max_token_length=32, sample_every_n_steps=2, **data,
                 sample_prompt_lines=[f"sks shape --w 64 --h 64 --s 2 --cn {control}"]) == 0
    evs = events(run_dir)
    assert evs[-1]["type"] == "done" and Path(next(e for e in evs if e["type"] == "sample")["path"]).is_file()

    controlnet = FluxControlNetModel.from_pretrained(str(out / "controlnet"))
    assert controlnet.config.num_layers == 1 and controlnet.config.num_single_layers == 1
    assert controlnet.controlnet_x_embedder.weight.abs().max() > 0  # the control input learned (it starts at 0)
    pipe = FluxControlNetPipeline.from_pretrained(str(tiny_flux_dir), controlnet=controlnet)

    def render(colour: str) -> torch.Tensor:
        return pipe("sks shape", control_image=Image.new("RGB", (64, 64), colour), height=64, width=64,
                    num_inference_steps=2, max_sequence_length=32, output_type="pt",
                    generator=torch.Generator().manual_seed(0)).images

    assert (render("black") - render("white")).abs().max() > 1e-4

    from trainers.core.errors import ConfigError
    from trainers.methods.controlnet.controlled import controlled
    from trainers.models import load_model

    model = load_model(str(tiny_flux_dir), "auto", torch.float32)  # training further starts from the saved one
    again = controlled(load_config("controlnet", overrides=[f'controlnet_model_name_or_path="{out / "controlnet"}"']),
                       model)
    assert torch.equal(again.controlnet.controlnet_x_embedder.weight, controlnet.controlnet_x_embedder.weight)
    with pytest.raises(ConfigError, match="num_double_layers: is 3, but the model's transformer has 1"):
        controlled(load_config("controlnet", overrides=["num_double_layers=3"]), model)


@pytest.mark.slow
def test_sdxl_controlnet_trains_and_steers_stable_diffusion_xl_controlnet_pipeline(tiny_sdxl_dir: Path,
                                                                                   tmp_path: Path) -> None:
    from diffusers import ControlNetModel, StableDiffusionXLControlNetPipeline

    from helpers import train

    out = tmp_path / "out"
    assert train("controlnet", tmp_path / "run", pretrained_model_name_or_path=str(tiny_sdxl_dir), output_dir=str(out),
                 max_train_steps=3, train_batch_size=1, learning_rate=1e-2, **tiny_data(tmp_path)) == 0
    # three steps: the zero convolutions move, then the control's embedding (its effect through the 8x embedding:
    # measured 7e-4)

    controlnet = ControlNetModel.from_pretrained(str(out / "controlnet"))
    assert controlnet.config.addition_embed_type == "text_time"  # SDXL's size and crop conditioning
    pipe = StableDiffusionXLControlNetPipeline.from_pretrained(str(tiny_sdxl_dir), controlnet=controlnet)

    def render(colour: str) -> torch.Tensor:
        return pipe("sks shape", image=Image.new("RGB", (64, 64), colour), height=64, width=64,
                    num_inference_steps=2, output_type="pt", generator=torch.Generator().manual_seed(0)).images

    assert (render("black") - render("white")).abs().max() > 1e-4


@pytest.mark.slow
def test_a_resumed_controlnet_run_saves_the_controlnet_of_the_uninterrupted_one(tiny_sd1_dir: Path,
                                                                               tmp_path: Path) -> None:
    from helpers import resumed_saves

    straight, resumed = resumed_saves("controlnet", tmp_path, pretrained_model_name_or_path=str(tiny_sd1_dir),
                                      flip_aug=True, random_crop=True, train_batch_size=2, learning_rate=1e-3,
                                      **tiny_data(tmp_path))
    assert straight.keys() == resumed.keys()
    assert max((straight[k] - resumed[k]).abs().max().item() for k in straight) < 1e-6


def test_the_flux_controlnet_preset_validates_on_a_flux_model(tiny_flux_dir: Path, tmp_path: Path) -> None:
    data = tiny_data(tmp_path)
    preset = Path(__file__).resolve().parents[2] / "presets" / "flux_dev_controlnet_48gb.toml"
    control = next(Path(str(data["conditioning_data_dir"])).rglob("*.png"))
    cfg = load_config("controlnet", preset, [f'pretrained_model_name_or_path="{tiny_flux_dir}"',
                                             f'train_data_dir="{data["train_data_dir"]}"',
                                             f'conditioning_data_dir="{data["conditioning_data_dir"]}"',
                                             f'output_dir="{tmp_path / "out"}"',
                                             f'sample_prompt_lines=["a shape --cn {control}"]'])
    assert (cfg.num_double_layers, cfg.num_single_layers, cfg.mixed_precision) == (2, 0, "bf16")
    assert [str(i) for i in validate(cfg, check_paths=True)] == []
