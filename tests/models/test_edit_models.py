"""Edit models (FLUX.1 Kontext, Qwen-Image-Edit, FLUX.2 with references) on tiny random-init models of their real
diffusers classes: the control image enters the transformer as the pipeline feeds it and only the target's tokens are
scored; missing controls are named before the model loads; and one trained 2-step LoRA samples from a control image,
resumes exactly and loads in the diffusers edit pipeline with every key used."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import events, train
from PIL import Image, ImageOps

from trainers.core.options import BY_NAME
from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.edit import encode_controls
from trainers.models.flow_latents import image_ids, pack_latents, unpack_latents
from trainers.models.flux.tiny import build_tiny_flux

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
        "network_dim": 4, "network_alpha": 2, "save_precision": "float"}
SUBSET = "2_sks shape"


@pytest.fixture(scope="module")
def kontext_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_flux(tmp_path_factory.mktemp("kontext") / "model", pipeline_class="FluxKontextPipeline")


def _pairs(root: Path) -> tuple[Path, Path]:
    """The demo dataset as targets and their mirror images as controls (the edit: mirror the picture)."""
    data = build_dataset(root / "data", folder=SUBSET)
    controls = root / "controls"
    controls.mkdir()
    for target in sorted((data / SUBSET).glob("*.png")):
        ImageOps.mirror(Image.open(target).convert("RGB")).save(controls / target.name)
    return data, controls


def test_the_control_enters_the_transformer_and_only_target_tokens_are_scored(kontext_dir: Path) -> None:
    model = load_model(str(kontext_dir), "auto", torch.float32)
    family = model.family
    assert family.name == "flux_kontext"
    torch.manual_seed(0)
    noisy, pixels = torch.randn(1, 4, 8, 8), torch.rand(1, 3, 16, 16)  # the tiny VAE halves sizes
    hidden, pooled = torch.randn(1, 5, 32), torch.randn(1, 32)
    timesteps = torch.tensor([500.0])

    def predict(control_pixels: torch.Tensor) -> torch.Tensor:
        family.slot.latents = [encode_controls(family, model.vae, control_pixels)]
        try:
            with torch.no_grad():
                return family.denoise(model.unet, noisy, timesteps, hidden, pooled, None)
        finally:
            family.slot.latents = None

    pred = predict(pixels)
    assert pred.shape == noisy.shape  # the target's tokens alone come back: the loss sees nothing else
    changed = pixels.clone()
    changed[0, :, 0, 0] = 1 - changed[0, :, 0, 0]  # one control pixel
    assert (predict(changed) - pred).abs().max() > 1e-6
    with torch.no_grad():
        plain = family.denoise(model.unet, noisy, timesteps, hidden, pooled, None)
    assert (plain - pred).abs().max() > 1e-6  # without a control the prediction differs

    # the pipeline's sequence: target tokens (0, row, col), then the control's (1, row, col); output cut to the target
    control = encode_controls(family, model.vae, pixels)
    ids = image_ids(4, 4, noisy.device, noisy.dtype)
    control_ids = ids.clone()
    control_ids[:, 0] = 1
    with torch.no_grad():
        full = model.unet(hidden_states=torch.cat([pack_latents(noisy), pack_latents(control)], dim=1),
                          timestep=timesteps / 1000, guidance=torch.full((1,), family.settings.guidance_scale),
                          pooled_projections=pooled, encoder_hidden_states=hidden, txt_ids=torch.zeros(5, 3),
                          img_ids=torch.cat([ids, control_ids]), return_dict=False)[0]
    assert full.shape[1] == 32  # 16 target + 16 control tokens
    assert torch.allclose(unpack_latents(full[:, :16], 8, 8), pred, atol=1e-5)


def _values(model: Path, **extra: object) -> dict:
    return {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(model), **extra}


def test_missing_controls_are_named_before_the_model_loads(kontext_dir: Path, tmp_path: Path) -> None:
    data, controls = _pairs(tmp_path)
    (controls / "001_red_square.png").unlink()
    (controls / "002_green_circle.png").rename(controls / "002_green_circle_0.png")
    Image.new("RGB", (8, 8)).save(controls / "002_green_circle_1.png")  # two references; Kontext takes one
    issues = model_issues(_values(kontext_dir, train_data_dir=str(data), control_directory=str(controls),
                                  sample_prompt_lines=["edit --ci /nowhere/x.png"]))
    messages = " ".join(i.message for i in issues if i.field == "control_directory")
    assert "1 target image(s) have no control image" in messages and "001_red_square.png" in messages
    assert any("more control images than the model takes (1): 002_green_circle.png" in i.message for i in issues)
    assert any(i.field == "sample_prompt_lines" and "/nowhere/x.png" in i.message for i in issues)


def test_a_control_folder_that_does_not_exist_and_no_controls_at_all(kontext_dir: Path, tmp_path: Path) -> None:
    data, _ = _pairs(tmp_path)
    [issue] = model_issues(_values(kontext_dir, train_data_dir=str(data), conditioning_data_dir=str(tmp_path / "no")))
    assert issue.field == "conditioning_data_dir" and "does not exist" in issue.message
    [issue] = model_issues(_values(kontext_dir, train_data_dir=str(data)))
    assert "has no control images" in issue.message and "control_directory" in issue.message


def test_a_dataset_config_subset_names_its_controls_with_either_key(kontext_dir: Path, tmp_path: Path) -> None:
    data, controls = _pairs(tmp_path)
    for key in ("control_directory", "conditioning_data_dir"):
        toml = tmp_path / f"{key}.toml"
        toml.write_text(f'[[datasets]]\nresolution = 64\n[[datasets.subsets]]\nimage_dir = "{data / SUBSET}"\n'
                        f'{key} = "{controls}"\n', encoding="utf-8")
        assert model_issues(_values(kontext_dir, dataset_config=str(toml))) == []
    (controls / "000_red_circle.png").unlink()
    issues = model_issues(_values(kontext_dir, dataset_config=str(toml)))
    assert [i.field for i in issues] == ["dataset_config"] and "000_red_circle.png" in issues[0].message


def test_controls_keep_their_own_size_with_no_resize_control_or_control_resolution(kontext_dir: Path,
                                                                                     tmp_path: Path) -> None:
    from trainers.core.errors import ConfigError
    from trainers.core.options import TrainConfig
    from trainers.data.catalog import build_catalog
    from trainers.models.edit import ControlSlot, EditControls, catalog_controls

    data, controls = _pairs(tmp_path)
    sizes = {"000_red_circle": (100, 70), "001_red_square": (100, 70), "002_green_circle": (70, 100)}
    for stem, size in sizes.items():
        Image.open(controls / f"{stem}.png").resize(size).save(controls / f"{stem}.png")
    model = load_model(str(kontext_dir), "auto", torch.float32)

    def trained_sizes(sizing: str) -> tuple[dict[str, tuple[int, int]], "ControlSlot", "EditControls"]:
        toml = tmp_path / "data.toml"
        toml.write_text(f'[[datasets]]\nresolution = 64\n{sizing}\n[[datasets.subsets]]\nimage_dir = '
                        f'"{data / SUBSET}"\ncontrol_directory = "{controls}"\n', encoding="utf-8")
        values = _values(kontext_dir, dataset_config=str(toml))
        assert model_issues(values) == []
        catalog = build_catalog(TrainConfig("lora", values).values, [])
        edit = EditControls(catalog, catalog_controls(catalog, 1, []), seed=0)
        index = {catalog.images[image].path.stem: n for n, image in enumerate(catalog.samples)}
        made = {stem: tuple(edit.control(controls / f"{stem}.png", 0, index[stem]).shape[:0:-1]) for stem in sizes}
        return made, index, edit

    assert set(trained_sizes("")[0].values()) == {(64, 64)}  # fitted to the target's bucket (musubi's default)
    own, index, edit = trained_sizes("no_resize_control = true")
    assert own == {"000_red_circle": (96, 64), "001_red_square": (96, 64), "002_green_circle": (64, 96)}  # 16 px
    slot = ControlSlot()
    same = torch.tensor([[0, index["000_red_circle"]], [0, index["001_red_square"]]])
    edit.fill(slot, same, model.family, model.vae, torch.device("cpu"), torch.float32)
    assert slot.latents[0].shape[-2:] == (32, 48)  # the tiny VAE halves each side: the controls' own size
    with pytest.raises(ConfigError, match=r"different sizes \(96x64, 64x96\).*train_batch_size = 1"):
        edit.fill(slot, torch.tensor([[0, index["000_red_circle"]], [0, index["002_green_circle"]]]), model.family,
                  model.vae, torch.device("cpu"), torch.float32)
    # about 64x64 pixels at the control's own aspect ratio (musubi-tuner's [64, 64] form); with no_resize_control
    # only a larger control is resized to it
    assert trained_sizes("control_resolution = [64, 64]")[0]["000_red_circle"] == (80, 48)
    assert trained_sizes("control_resolution = 128\nno_resize_control = true")[0]["000_red_circle"] == (96, 64)
    assert trained_sizes("control_resolution = 64\nno_resize_control = true")[0]["000_red_circle"] == (80, 48)


def test_control_sizing_is_refused_by_name_where_there_are_no_controls(kontext_dir: Path, flux2_dir: Path,
                                                                       tmp_path: Path) -> None:
    from trainers.core.errors import ConfigError
    from trainers.core.options import TrainConfig
    from trainers.data.dataset_toml import load_dataset_config
    from trainers.models.edit_rules import takes_controls
    from trainers.preflight.validate import validate

    data, _ = _pairs(tmp_path)
    plain = build_tiny_flux(tmp_path / "flux")
    issues = validate(TrainConfig("lora", _values(plain, train_data_dir=str(data), no_resize_control=True,
                                                  control_resolution="1024")), check_paths=False)
    assert {"no_resize_control", "control_resolution"} <= {i.field for i in issues}
    issues = model_issues(_values(flux2_dir, train_data_dir=str(data), control_resolution="1024"))
    assert [i.field for i in issues] == ["control_resolution"] and "control_directory" in issues[0].message
    toml = tmp_path / "data.toml"
    for model, value, named in ((plain, "1024", "this model takes none"), (kontext_dir, '"big"', "got 'big'")):
        toml.write_text(f'[[datasets]]\ncontrol_resolution = {value}\n[[datasets.subsets]]\nimage_dir = '
                        f'"{data / SUBSET}"\n', encoding="utf-8")
        values = TrainConfig("lora", _values(model)).values
        with pytest.raises(ConfigError) as refused:  # read as the run's start and the dataset check read it
            load_dataset_config(toml, values, [], takes_controls(values))
        assert "control_resolution" in str(refused.value) and named in str(refused.value)


@dataclass
class Run:
    out: Path
    straight: Path
    lora: dict[str, torch.Tensor]
    resumed: dict[str, torch.Tensor]


def _trained(model_dir: Path, tmp: Path, steps: int) -> Run:
    """A 2-step edit LoRA (a sample from a control image at its end, a state at step 1), and the same resumed."""
    data, controls = _pairs(tmp)
    common = {"pretrained_model_name_or_path": str(model_dir), "train_data_dir": str(data),
              "control_directory": str(controls), "output_dir": str(tmp / "out"), **FAST}
    prompt = f"mirror it --ci {controls / '000_red_circle.png'} --w 64 --h 64 --s {steps}"
    assert train("lora", tmp / "straight", **common, max_train_steps=2, output_name="straight", save_every_n_steps=1,
                 save_state=True, sample_prompt_lines=[prompt], sample_every_n_steps=2) == 0
    state = tmp / "out" / "straight-step00000001-state"
    assert train("lora", tmp / "resumed", **common, max_train_steps=2, output_name="resumed", resume=str(state)) == 0
    lora, _ = read_lora_file(tmp / "out" / "straight.safetensors")
    resumed, _ = read_lora_file(tmp / "out" / "resumed.safetensors")
    return Run(tmp / "out", tmp / "straight", lora, resumed)


@pytest.fixture(scope="module")
def kontext_run(kontext_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _trained(kontext_dir, tmp_path_factory.mktemp("kontext-run"), steps=2)


@pytest.mark.slow
def test_kontext_lora_samples_from_a_control_image_and_resumes_exactly(kontext_run: Run) -> None:
    evs = events(kontext_run.straight)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    sample = Path(next(e for e in evs if e["type"] == "sample")["path"])
    assert Image.open(sample).size == (64, 64)
    assert "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight" in kontext_run.lora  # FLUX.1's names
    assert kontext_run.lora.keys() == kontext_run.resumed.keys()
    assert max((kontext_run.lora[k] - kontext_run.resumed[k]).abs().max().item() for k in kontext_run.lora) < 1e-6


@pytest.mark.slow
def test_kontext_lora_says_kontext_as_musubi_tuner_writes_it_and_browse_names_it(kontext_run: Run) -> None:
    from trainers.models.file_kind import model_kind
    from trainers.loras.lora_family import guess_family
    from trainers.loras.lora_state import read_lora

    path = kontext_run.out / "straight.safetensors"
    assert read_lora_file(path)[1]["ss_base_model_version"] == "flux_kontext"  # not FLUX.1's "flux1"
    assert model_kind(path) == "FLUX.1 Kontext LoRA"
    assert [f.name for f in guess_family(read_lora(path, "lora")).families] == ["flux_kontext"]


@pytest.mark.slow
def test_kontext_lora_loads_in_the_diffusers_edit_pipeline_with_every_key(kontext_dir: Path, kontext_run: Run) -> None:
    from diffusers import FluxKontextPipeline

    model = load_model(str(kontext_dir), "auto", torch.float32)
    converted = model.family.lora_for_pipeline(kontext_run.lora, model)
    pipe = FluxKontextPipeline.from_pretrained(kontext_dir)
    control = Image.new("RGB", (64, 64), (200, 30, 30))

    def image() -> torch.Tensor:
        return pipe(prompt="mirror it", image=control, num_inference_steps=2, height=64, width=64, max_area=64 * 64,
                    _auto_resize=False, output_type="pt", generator=torch.Generator().manual_seed(0),
                    max_sequence_length=32).images

    base = image()
    pipe.load_lora_weights(converted)
    loaded = {f"{part}.{name}" for part in ("transformer", "text_encoder")
              for name, module in getattr(pipe, part).named_modules() if hasattr(module, "lora_A") and module.lora_A}
    assert loaded == {k.removesuffix(".lora_A.weight") for k in converted if k.endswith("lora_A.weight")}
    assert (image() - base).abs().max() > 1e-4


def _red_and_blue(folder: Path, size: int = 64) -> tuple[Path, Path]:
    red, blue = folder / "red.png", folder / "blue.png"
    Image.new("RGB", (size, size), (220, 20, 20)).save(red)
    Image.new("RGB", (size, size), (20, 20, 220)).save(blue)
    return red, blue


def _generated_from_red_and_blue(model_dir: Path, tmp_path: Path) -> tuple["np.ndarray", "np.ndarray"]:
    """Generate's images (one seed) from a red input image (input_image) and from a blue one (a prompt's --ci)."""
    import numpy as np

    from trainers.generate.options import GenerateConfig
    from trainers.generate.plan import Variant, build_plan
    from trainers.generate.renderer import Renderer

    red, blue = _red_and_blue(tmp_path)
    cfg = GenerateConfig({"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu", "cfg_scale": 1.0,
                          "model": str(model_dir), "input_image": str(red),
                          "prompts": ["mirror it --d 1", f"mirror it --d 1 --ci {blue}"]})
    variants = [Variant("base")]
    renderer = Renderer(cfg, "cpu", variants)
    from_red, from_blue = (np.asarray(Image.open(renderer.render(item)[0]).convert("RGB")).astype(int)
                           for item in build_plan(cfg, tmp_path / "images", 7, variants).items)
    return from_red, from_blue


def test_generate_edits_its_input_image(kontext_dir: Path, tmp_path: Path) -> None:
    from_red, from_blue = _generated_from_red_and_blue(kontext_dir, tmp_path)
    assert from_red.shape == (64, 64, 3)  # the size asked for, not Kontext's preferred 1024 px sizes
    assert abs(from_red - from_blue).max() > 0  # the same seed, another input image


def test_the_compare_grid_edits_its_input_images_and_shows_them(kontext_dir: Path, tmp_path: Path) -> None:
    import numpy as np

    from trainers.generate.grid import read_grid_layout
    from trainers.generate.job import run_job
    from trainers.generate.options import GenerateConfig, check_config

    red, blue = _red_and_blue(tmp_path, size=96)  # larger than the cells: fitted into them
    values = {"mode": "compare", "model": str(kontext_dir), "compare_loras": [str(kontext_dir)], "width": 64,
              "height": 64, "steps": 2, "cfg_scale": 1.0, "devices": "cpu", "cpu_threads": 1,
              "input_image": str(red), "prompts": ["mirror it --d 1", f"mirror it --d 1 --ci {blue}"]}
    result = run_job(GenerateConfig(values), tmp_path / "job")
    grid = read_grid_layout(result.grid)
    assert grid["rows"][0] == "input image" and grid["cells"][0] == [str(red), str(blue)]
    saved = [np.asarray(Image.open(path).convert("RGB")).astype(int) for path in grid["cells"][1]]
    assert abs(saved[0] - saved[1]).max() > 0  # one seed, the other column's input image
    missing = check_config(GenerateConfig({**values, "input_image": str(tmp_path / "gone.png"),
                                           "prompts": [f"mirror it --ci {tmp_path / 'lost.png'}"]}))
    named = {i.field: i.message for i in missing if i.field in ("input_image", "prompts")}
    assert "gone.png" in named["input_image"] and "lost.png" in named["prompts"]


def test_what_edit_training_cannot_do_yet_is_named(kontext_dir: Path, tmp_path: Path) -> None:
    data, controls = _pairs(tmp_path)
    issues = model_issues(_values(kontext_dir, train_data_dir=str(data), control_directory=str(controls),
                                  reg_data_dir=str(data), validation_split=0.25))
    assert sorted(i.field for i in issues) == ["reg_data_dir", "validation_split"]


def test_conditioning_data_dir_holds_an_edit_models_controls_without_masked_loss(kontext_dir: Path,
                                                                                  tmp_path: Path) -> None:
    from trainers.core.errors import ConfigError
    from trainers.core.options import TrainConfig
    from trainers.data.dataset_toml import load_dataset_config
    from trainers.preflight.validate import validate

    data, controls = _pairs(tmp_path)
    values = {"pretrained_model_name_or_path": str(kontext_dir), "train_data_dir": str(data),
              "conditioning_data_dir": str(controls), "output_dir": str(tmp_path / "out")}
    assert [i for i in validate(TrainConfig("lora", values)) if i.field == "conditioning_data_dir"] == []
    sd_values = {**values, "pretrained_model_name_or_path": str(tmp_path / "nowhere")}  # not an edit model
    assert any("masked_loss" in i.message for i in validate(TrainConfig("lora", sd_values), check_paths=False))


@pytest.fixture(scope="module")
def flux2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainers.models.flux2.tiny import build_tiny_flux2

    return build_tiny_flux2(tmp_path_factory.mktemp("flux2") / "model")


def test_flux2_references_follow_the_target_as_the_pipeline_feeds_them(flux2_dir: Path) -> None:
    from diffusers import Flux2Pipeline

    model = load_model(str(flux2_dir), "auto", torch.float32)
    family = model.family
    torch.manual_seed(0)
    noisy, hidden, timesteps = torch.randn(1, 4, 8, 8), torch.randn(1, 6, 48), torch.tensor([500.0])
    square, wide = torch.rand(1, 3, 16, 16), torch.rand(1, 3, 8, 16)  # references keep their own sizes

    def predict(references: list[torch.Tensor]) -> torch.Tensor:
        family.slot.latents = [encode_controls(family, model.vae, pixels) for pixels in references]
        try:
            with torch.no_grad():
                return family.denoise(model.unet, noisy, timesteps, hidden, None, None)
        finally:
            family.slot.latents = None

    pred = predict([square, wide])
    assert pred.shape == noisy.shape  # the target's tokens alone come back: the loss sees nothing else
    changed = wide.clone()
    changed[0, :, 0, 0] = 1 - changed[0, :, 0, 0]  # one pixel of the second reference
    assert (predict([square, changed]) - pred).abs().max() > 1e-6
    assert (predict([square]) - pred).abs().max() > 1e-6

    # Flux2Pipeline's sequence: the target's tokens (t = 0), then each reference's (t = 10, 20), cut to the target
    def tokens(latents: torch.Tensor) -> torch.Tensor:
        return Flux2Pipeline._pack_latents(Flux2Pipeline._patchify_latents(latents))

    references = [Flux2Pipeline._patchify_latents(encode_controls(family, model.vae, p)) for p in (square, wide)]
    ids = torch.cat([Flux2Pipeline._prepare_latent_ids(Flux2Pipeline._patchify_latents(noisy)),
                     Flux2Pipeline._prepare_image_ids(references)], dim=1)
    with torch.no_grad():
        full = model.unet(hidden_states=torch.cat([tokens(noisy), *map(Flux2Pipeline._pack_latents, references)], 1),
                          timestep=timesteps / 1000, guidance=family.guidance(model.unet, 1, noisy.device),
                          encoder_hidden_states=hidden, txt_ids=Flux2Pipeline._prepare_text_ids(hidden),
                          img_ids=ids, return_dict=False)[0]
    assert full.shape[1] == 16 + 16 + 8
    assert torch.allclose(full[:, :16], tokens(pred), atol=1e-5)


def test_flux2_is_an_edit_model_only_when_a_control_folder_is_named(flux2_dir: Path, tmp_path: Path) -> None:
    data, controls = _pairs(tmp_path)
    assert model_issues(_values(flux2_dir, train_data_dir=str(data), reg_data_dir=str(data))) == []  # text-to-image
    (controls / "001_red_square.png").unlink()
    for number in range(4):  # four references; FLUX.2 takes three
        Image.new("RGB", (8, 8)).save(controls / f"002_green_circle_{number}.png")
    (controls / "002_green_circle.png").unlink()
    issues = model_issues(_values(flux2_dir, train_data_dir=str(data), control_directory=str(controls),
                                  reg_data_dir=str(data)))
    messages = " ".join(i.message for i in issues)
    assert "001_red_square.png" in messages and "more control images than the model takes (3)" in messages
    assert "reg_data_dir" in {i.field for i in issues}


def test_flux2_generates_from_its_input_image(flux2_dir: Path, tmp_path: Path) -> None:
    from_red, from_blue = _generated_from_red_and_blue(flux2_dir, tmp_path)
    assert from_red.shape == (64, 64, 3)
    assert abs(from_red - from_blue).max() > 0  # Flux2Pipeline read the image: the same seed, another input image


def test_flux2_edit_preset_fits_its_card_counting_the_references_tokens(tmp_path: Path) -> None:
    import re

    from trainers.core.options import load_config
    from trainers.memory_estimate import FIT_MARGIN, estimate_memory
    from trainers.models.flux2.tiny import build_tiny_flux2_klein
    from trainers.preflight.validate import validate

    preset = Path(__file__).resolve().parents[2] / "presets" / "flux2_klein_edit_lora_16gb.toml"
    data, controls = _pairs(tmp_path)
    two = tmp_path / "two"
    two.mkdir()
    for control in controls.glob("*.png"):
        for number in range(2):
            Image.open(control).save(two / f"{control.stem}_{number}.png")

    def card_gb(*extra: str) -> float:
        cfg = load_config("lora", preset, ['pretrained_model_name_or_path="black-forest-labs/FLUX.2-klein-base-9B"',
                                           f'train_data_dir="{data}"', *extra])
        estimate = estimate_memory(cfg)
        assert estimate is not None and estimate.source.startswith("the published FLUX.2 klein 9B sizes")
        return estimate.card_gb

    text = preset.read_text(encoding="utf-8")
    alone, one, pair = card_gb(), card_gb(f'control_directory="{controls}"'), card_gb(f'control_directory="{two}"')
    assert alone < one < pair  # each reference's tokens join the sequence
    assert one <= FIT_MARGIN * 16 and f"~{one:.1f} GB of the card" in text
    smaller = card_gb(f'control_directory="{two}"', 'resolution="768"')
    assert smaller <= FIT_MARGIN * 16 and re.search(rf"two references.*768.*~{smaller:.1f} GB", text, re.S)
    model = build_tiny_flux2_klein(tmp_path / "klein")
    cfg = load_config("lora", preset, [f'pretrained_model_name_or_path="{model}"', f'train_data_dir="{data}"',
                                       f'control_directory="{two}"', f'output_dir="{tmp_path / "out"}"'])
    assert [str(issue) for issue in validate(cfg, check_paths=True)] == []


def _two_references(root: Path, steps: int = 2) -> tuple[Path, Path, list[str]]:
    """The pairs with two references each (the mirror image and it upside down), and two sample prompts (one seed)
    each drawn from a target's two references."""
    data, controls = _pairs(root)
    for control in sorted(controls.glob("*.png")):
        image = Image.open(control)
        image.save(controls / f"{control.stem}_0.png")
        ImageOps.flip(image).save(controls / f"{control.stem}_1.png")
        control.unlink()
    references = (f"--ci {controls / f'{name}_0.png'} --ci {controls / f'{name}_1.png'}"
                  for name in ("000_red_circle", "001_red_square"))
    return data, controls, [f"mirror it {pair} --w 64 --h 64 --s {steps} --d 3" for pair in references]


@pytest.mark.slow
def test_flux2_edit_lora_trains_with_two_references_and_samples_from_them(flux2_dir: Path, tmp_path: Path) -> None:
    data, controls, prompts = _two_references(tmp_path)
    Image.new("RGB", (8, 8)).save(controls / "stray.png")  # a control no target has: the run names it
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(flux2_dir), train_data_dir=str(data),
                 control_directory=str(controls), output_dir=str(tmp_path / "out"), output_name="edit", **FAST,
                 max_train_steps=2, timestep_sampling="flux2_shift", guidance_scale=1.0, sample_prompt_lines=prompts,
                 sample_every_n_steps=2) == 0
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert any("stray.png" in e["message"] for e in evs if e["type"] == "warning")  # the pairs were read
    samples = [torch.tensor(list(Image.open(e["path"]).convert("RGB").getdata())) for e in evs if e["type"] == "sample"]
    assert samples[0].shape == (64 * 64, 3)
    assert (samples[0] - samples[1]).abs().max() > 0  # one seed, other references: the pipeline read them
    lora, metadata = read_lora_file(tmp_path / "out" / "edit.safetensors")
    assert "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight" in lora  # FLUX.2's names, as without controls
    assert metadata["ss_base_model_version"] == "flux_2_dev"
