"""What the family tests (test_<family>.py, in process on each family's tiny model) share: the option values of a
model, a folder holding only a model_index.json, a random LoRA network saved in the family's file names with each
layer's update, the updates a pipeline's load_lora_weights put in its layers, and for the video families a tiny clips
dataset and the 2-step LoRA run (a sample, a state at step 1) resumed from that state."""
from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch


def option_values(model_dir: Path, **options: object) -> dict[str, object]:
    """Every option at its default, the model `model_dir`, then `options`."""
    from trainers.core.options import BY_NAME

    return {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(model_dir), **options}


def index_folder(tmp_path: Path, name: str, index: dict[str, object]) -> Path:
    """A model folder of only its model_index.json: what the family rules read before anything loads."""
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


def saved_network(model: object) -> SimpleNamespace:
    """A network on every target of a copy of the model's transformer (random weights, alpha 2 at rank 4), its file's
    tensors in the family's names, and each layer's update (diffusers' path -> B @ A)."""
    from lora_networks import random_network

    from trainers.models.flow_lora import kohya_to_diffusers

    unet = copy.deepcopy(model.unet).eval()
    network, targets, state = random_network(model.family, unet)
    view = SimpleNamespace(unet=unet, text_encoders=[], family=model.family)
    peft = kohya_to_diffusers(state, view, targets, ())
    updates = {k.removeprefix("transformer.").removesuffix(".lora_A.weight"): peft[k.replace("lora_A", "lora_B")] @ v
               for k, v in peft.items() if k.endswith(".lora_A.weight")}
    return SimpleNamespace(unet=unet, network=network, targets=targets, file=model.family.lora_file(state, view),
                           state=state, updates=updates, view=view, peft=peft)


def model_fixtures(build: Callable[[Path], Path], name: str) -> tuple[object, object]:
    """A test module's `tiny` (`build`'s tiny model folder, in a temporary folder named `name`) and `model` (it
    loaded in float32) fixtures, module scope."""
    import pytest

    @pytest.fixture(scope="module")
    def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return build(tmp_path_factory.mktemp(name) / "model")

    @pytest.fixture(scope="module")
    def model(tiny: Path) -> object:
        from trainers.models import load_model

        return load_model(str(tiny), "auto", torch.float32)

    return tiny, model


def saved_fixture() -> object:
    """A test module's `saved` fixture (module scope): saved_network of its `model` fixture."""
    import pytest

    @pytest.fixture(scope="module")
    def saved(model: object) -> SimpleNamespace:
        return saved_network(model)

    return saved


def adapter_updates(module: torch.nn.Module, adapter: str = "default_0") -> dict[str, torch.Tensor]:
    """Each layer's update B @ A x scaling of the PEFT adapter that load_lora_weights put in `module`."""
    return {name: layer.lora_B[adapter].weight @ layer.lora_A[adapter].weight * layer.scaling[adapter]
            for name, layer in module.named_modules() if hasattr(layer, "lora_A") and adapter in layer.lora_A}


def check_adapter_updates(module: torch.nn.Module, updates: dict[str, torch.Tensor],
                          adapter: str = "default_0") -> None:
    """The adapter in `module` holds the trained layers' updates, each one, and no other layer."""
    loaded = adapter_updates(module, adapter)
    assert loaded.keys() == updates.keys()
    for name, update in updates.items():
        assert torch.allclose(loaded[name], update, atol=1e-5), name


def check_network_denoises_as(family: object, loaded: torch.nn.Module, saved: SimpleNamespace,
                              noisy: torch.Tensor, *conditions: object) -> None:
    """The network as training runs it (applied to the saved network's transformer copy) computes what `loaded`,
    a transformer holding the LoRA as diffusers loads it, does."""
    timesteps = torch.full((noisy.shape[0],), 500.0)
    saved.network.apply_to()
    with torch.no_grad():
        assert torch.allclose(family.denoise(loaded, noisy, timesteps, *conditions, None),
                              family.denoise(saved.unet, noisy, timesteps, *conditions, None), atol=1e-4)


def write_captioned_clip(path: Path, frames: int, caption: str, fps: int = 16,
                         size: tuple[int, int] = (32, 32)) -> Path:
    """An mpeg4 clip whose frames brighten (tests/data/test_video_clips.py's), with its caption beside it."""
    from tests.data.test_video_clips import write_clip

    write_clip(path, frames, fps, size=size)
    path.with_suffix(".txt").write_text(caption)
    return path


def clips_dataset(tmp: Path, fps: int = 16, caption_tail: str = "") -> Path:
    """3 tiny clips (9, 5 and 12 frames, captioned "a clip of N frames" + `caption_tail`) and an image, as a
    musubi-tuner video dataset config."""
    from PIL import Image

    clips, images = tmp / "clips", tmp / "images"
    clips.mkdir(parents=True)
    images.mkdir()
    for name, frames in (("a.mp4", 9), ("b.mp4", 5), ("c.mp4", 12)):
        write_captioned_clip(clips / name, frames, f"a clip of {frames} frames{caption_tail}", fps)
    Image.new("RGB", (32, 32), (200, 40, 40)).save(images / "red.png")
    (images / "red.txt").write_text("a red square")
    config = tmp / "dataset.toml"
    config.write_text(f'[general]\nresolution = [32, 32]\nbatch_size = 1\n\n[[datasets]]\nvideo_directory = '
                      f'"{clips}"\ntarget_frames = [1, 5]\n\n[[datasets]]\nimage_directory = "{images}"\n')
    return config


def clip_lora_runs(tiny: Path, tmp: Path, dataset: Path, sample_side: int = 32, **options: object) -> SimpleNamespace:
    """A 2-step LoRA of the tiny model from `dataset` (a `sample_side` square sample at its end, a state at step 1),
    the same resumed from that state; `options` over the shared ones (shift sampling, rank 4, alpha 2, learning rate
    1e-2)."""
    from helpers import train

    from trainers.methods.lora.file_format import read_lora_file

    common = {"pretrained_model_name_or_path": str(tiny), "dataset_config": str(dataset),
              "output_dir": str(tmp / "out"), "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "network_alpha": 2, "save_precision": "float", "timestep_sampling": "shift",
              "max_train_steps": 2, **options}
    assert train("lora", tmp / "straight", **common, output_name="straight", save_every_n_steps=1, save_state=True,
                 sample_prompt_lines=[f"a clip --n blurry --w {sample_side} --h {sample_side} --s 2"],
                 sample_every_n_steps=2) == 0
    state = tmp / "out" / "straight-step00000001-state"
    assert train("lora", tmp / "resumed", **common, output_name="resumed", resume=str(state)) == 0
    straight, metadata = read_lora_file(tmp / "out" / "straight.safetensors")
    return SimpleNamespace(run=tmp / "straight", lora=straight, metadata=metadata,
                           file=tmp / "out" / "straight.safetensors", resumed_run=tmp / "resumed",
                           resumed=read_lora_file(tmp / "out" / "resumed.safetensors")[0])


def check_comfyui_loads_by_generic_names(saved: SimpleNamespace) -> None:
    """A ComfyUI model holding the published (diffusers-named) weights: its generic `diffusion_model.<path>` names
    address every key of the file, each into the layer that was trained."""
    from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map

    shapes = {f"{PREFIX}{k}": v.shape for k, v in saved.unet.state_dict().items()}
    patches, not_loaded = load_lora(saved.file, unet_key_map(shapes))
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    assert len(patches) == len(saved.targets)
    check_patches(patches, shapes)
    for target in saved.targets:
        assert torch.allclose(patches[f"{PREFIX}{target.path}.weight"], saved.updates[target.path], atol=1e-5)


def check_ai_toolkit_files_load_whole(model: object, paths: tuple[str, ...]) -> None:
    """ai-toolkit's LoRAs: `diffusion_model.<path>` lora_A/lora_B without alphas on the Linear layers `paths`, read
    in the family's names and loaded whole by its pipeline's load_lora_weights."""
    family = model.family.configured({})
    torch.manual_seed(0)
    theirs, updates = {}, {}
    for path in paths:
        layer = model.unet.get_submodule(path)
        down, up = torch.randn(4, layer.in_features), torch.randn(layer.out_features, 4)
        theirs[f"diffusion_model.{path}.lora_A.weight"], theirs[f"diffusion_model.{path}.lora_B.weight"] = down, up
        updates[path] = up @ down
    converted = family.lora_for_pipeline(family.lora_in_own_names(theirs), model)
    pipe = family.build_pipeline(SimpleNamespace(**{**vars(model), "unet": copy.deepcopy(model.unet).eval()}),
                                 family.inference_scheduler(model, "euler"))
    pipe.load_lora_weights(converted, adapter_name="aitk")
    for path, update in updates.items():
        module = pipe.transformer.get_submodule(path)
        loaded = module.lora_B["aitk"].weight @ module.lora_A["aitk"].weight * module.scaling["aitk"]
        assert torch.allclose(loaded, update, atol=1e-4), path


def check_preset(path: Path, published_model: str, tiny: Path, dataset: Path, output_dir: Path) -> tuple[object, str]:
    """A LoRA preset `<name>_<tier>gb.toml` fits its tier by the memory estimate for `published_model`, its comment
    gives the estimate, and Validate's preflight on the tiny model with the clips `dataset` finds no error and its 7
    samples. (The estimate, the comment's text.)"""
    from trainers.core.options import load_config
    from trainers.memory_estimate import FIT_MARGIN, estimate_memory
    from trainers.preflight.report import preflight

    tier = int(path.stem.rsplit("_", 1)[1].removesuffix("gb"))
    estimate = estimate_memory(load_config("lora", path, [f'pretrained_model_name_or_path="{published_model}"']))
    assert estimate.card_gb <= FIT_MARGIN * tier and estimate.caching_card_gb <= tier
    comment = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    assert f"~{estimate.card_gb:.1f} GB of the card" in comment
    cfg = load_config("lora", path, [f'pretrained_model_name_or_path="{tiny}"', f'dataset_config="{dataset}"',
                                     f'output_dir="{output_dir}"'])
    report = preflight(cfg)
    assert [str(issue) for issue in report.errors] == [] and report.train_samples == 7
    return estimate, comment


def check_clip_run_sampled(runs: SimpleNamespace) -> Path:
    """The 2-step clip LoRA run (clip_lora_runs) reported both steps and wrote an mp4 sample: its path."""
    from helpers import events

    evs = events(runs.run)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    sample = Path(next(e for e in evs if e["type"] == "sample")["path"])
    assert sample.suffix == ".mp4" and sample.stat().st_size > 0
    return sample


def check_resumed_equals_straight(runs: SimpleNamespace) -> None:
    """The LoRA resumed from the step-1 state holds the uninterrupted run's keys and weights."""
    assert runs.lora.keys() == runs.resumed.keys()
    assert max((runs.lora[k] - runs.resumed[k]).abs().max().item() for k in runs.lora) < 1e-6


def check_pipeline_loads_every_key(model: object, saved: SimpleNamespace, captions: list[str],
                                   latents: tuple[int, ...]) -> None:
    """The saved file as it is: the family's pipeline's lora_state_dict reads every `diffusion_model.` key,
    load_lora_weights puts each update in the layer trained, and its transformer then computes (on `captions`,
    noisy latents of shape `latents`) what training's network does."""
    family = model.family.configured({})
    pipe = family.build_pipeline(SimpleNamespace(**{**vars(model), "unet": copy.deepcopy(model.unet).eval()}),
                                 family.inference_scheduler(model, "euler"))
    assert len(pipe.lora_state_dict(dict(saved.file))) == len(saved.file)
    pipe.load_lora_weights(dict(saved.file), adapter_name="default_0")
    check_adapter_updates(pipe.transformer, saved.updates)
    conditions = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, captions), 1)
    check_network_denoises_as(family, pipe.transformer, saved, torch.randn(*latents), *conditions)


def check_sample_renders_from_a_first_frame(model: object, tmp_path: Path) -> None:
    """An image-to-video model's training sample from a prompt's --ci first frame: an mp4 clip."""
    from PIL import Image

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    Image.new("RGB", (32, 32), (200, 40, 40)).save(tmp_path / "first.png")
    prompts = config_prompts("", [f"a red fox --w 32 --h 32 --s 2 --d 3 --ci {tmp_path / 'first.png'}"])
    (written,) = generate_samples(model, prompts, tmp_path, "step2", default_size=(32, 32), default_steps=2,
                                  default_cfg=1.0)
    assert written.suffix == ".mp4" and written.stat().st_size > 0


def check_wrong_family_refused(values: Callable[..., dict[str, object]], tiny: Path, tmp_path: Path, family: str,
                               title: str, other: str, other_pipeline: tuple[str, str] = ("QwenImagePipeline",
                                                                                          "Qwen-Image")) -> None:
    """Before anything loads: the tiny model run as the `other` family is refused naming this one (`title`), and a
    folder of another family's pipeline (class, title) run as `family` is refused naming that family."""
    from trainers.models.checks import model_issues

    (issue,) = model_issues(values(tiny, model_family=other))
    assert issue.field == "model_family" and title in issue.message
    pipeline, its_title = other_pipeline
    folder = index_folder(tmp_path, "other", {"_class_name": pipeline})
    (issue,) = model_issues(values(folder, model_family=family))
    assert issue.field == "model_family" and its_title in issue.message


def checkpointing_runs(tiny: Path, captions: list[str]) -> Iterator[tuple[object, object, tuple[torch.Tensor, ...]]]:
    """The tiny model loaded twice, in training mode, without then with gradient checkpointing: each time (the
    loaded model, its configured family, the captions' encoded conditions)."""
    from trainers.models import load_model

    for checkpointing in (False, True):
        loaded = load_model(str(tiny), "auto", torch.float32)
        family = loaded.family.configured({})
        if checkpointing:
            loaded.unet.enable_gradient_checkpointing()
        loaded.unet.train()
        yield loaded, family, family.encode_prompts(loaded.text_encoders,
                                                    family.tokenize(loaded.tokenizers, captions), 1)


def clip_and_image_flow_steps(model: object, caption: str, shift: float,
                              masked: bool) -> Iterator[SimpleNamespace]:
    """One flow-matching step on `caption` (shift sampling at `shift`) of a copy of the model's transformer on a
    5-frame clip as the video dataset gives it (B, F, C, H, W), then on an image as the image dataset does
    (B, C, H, W), the text mask passed where `masked`: each loss finite and positive; after each step, the run (its
    unet's gradients)."""
    from trainers.core.options import BY_NAME
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = model.family.configured({**{n: o.default for n, o in BY_NAME.items()},
                                      "timestep_sampling": "shift", "discrete_flow_shift": shift})
    run = SimpleNamespace(**{**model.__dict__, "family": family, "unet": copy.deepcopy(model.unet)})
    hidden, mask = model.encode_texts([caption], 1)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, ids: object, sizes: object,
                  embeds: object) -> torch.Tensor:
        n = noisy.shape[0]
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(n, -1, -1),
                              mask.expand(n, -1) if masked else None, None)

    opts = NoiseOptions(seed=1, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    sizes = {name: torch.zeros(1, 2) for name in ("original_size", "crop_top_left", "target_size")}
    for pixels in (torch.rand(1, 5, 3, 32, 32) * 2 - 1, torch.rand(1, 3, 32, 32) * 2 - 1):
        run.unet.zero_grad()
        batch = {"pixels": pixels, "keys": torch.tensor([[0, 3]]), **sizes}
        loss = flow_loss(predictor, run, batch, opts, torch.float32)
        loss.backward()
        assert torch.isfinite(loss) and loss > 0
        yield run


def loras_from_files_and_folder(files: dict[str, str], folder: Path, tmp_path: Path, steps: int
                                ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The LoRA a `steps`-step run trains from a model's single files (`files`: the options naming them) and the one
    the same run trains from its diffusers folder, on the demo dataset at 64 pixels."""
    from helpers import train
    from safetensors.torch import load_file

    from trainers.demo import build_dataset

    common = {"train_data_dir": str(build_dataset(tmp_path / "data", folder="2_sks shape")), "resolution": "64",
              "max_train_steps": steps, "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "save_precision": "float", "seed": 3}
    assert train("lora", tmp_path / "files", **files, **common, output_dir=str(tmp_path / "a"), output_name="l") == 0
    assert train("lora", tmp_path / "folder", **common, pretrained_model_name_or_path=str(folder),
                 output_dir=str(tmp_path / "b"), output_name="l") == 0
    return load_file(tmp_path / "a" / "l.safetensors"), load_file(tmp_path / "b" / "l.safetensors")


def load_split_files(files: dict[str, str]) -> object:
    """The model from ComfyUI's split files as the options name them (the model file and the files beside it)."""
    from trainers.models import ModelFiles, load_model

    given = dict(files)
    return load_model(given.pop("pretrained_model_name_or_path"), "auto", torch.float32,
                      files=ModelFiles.from_values(given))


def write_split_files(states: dict[str, dict[str, torch.Tensor]], files: dict[str, Path],
                      tokenizers: list[tuple[str, object]] = ()) -> dict[str, str]:
    """Each option's file of `files` written with its state, each (hub id, tokenizer) where a first run leaves it in
    files["tokenizer_cache_dir"]; the options naming them."""
    from safetensors.torch import save_file

    for option, state in states.items():
        files[option].parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in state.items()}, files[option])
    for hub_id, tokenizer in tokenizers:
        tokenizer.save_pretrained(files["tokenizer_cache_dir"] / hub_id.replace("/", "_"))  # type: ignore[attr-defined]
    return {k: str(v) for k, v in files.items()}


# as the presets of the single-file families train: latents and text outputs cached on disk, gradient checkpointing
PRESET_LIKE = {"cache_latents": True, "cache_text_encoder_outputs": True, "cache_text_encoder_outputs_to_disk": True,
               "network_train_unet_only": True, "gradient_checkpointing": True}


@dataclass
class FileRuns:
    """A single-file family's runs (file_runs): their model files, output folder, the straight LoRA run's folder,
    its tensors and metadata, the resumed run's tensors; the finetune's file is `out / "finetune.safetensors"`."""
    files: dict[str, str]
    out: Path
    straight_run: Path
    lora: dict[str, torch.Tensor]
    metadata: dict[str, str]
    resumed: dict[str, torch.Tensor]


def file_runs(tmp: Path, files: dict[str, str], fast: dict[str, object], **lora: object) -> FileRuns:
    """On the tiny model `files` (its single files): a 2-step LoRA trained as the presets train, saving at step 1 and
    sampling at step 2, the same resumed from its step-1 state, and a 2-step finetune saved as the single file;
    `fast` over the shared options, `lora` on both LoRA runs (network_args)."""
    from helpers import train

    from trainers.demo import build_dataset
    from trainers.methods.lora.file_format import read_lora_file

    dataset = build_dataset(tmp / "data", folder="2_sks shape")
    common = {**files, "train_data_dir": str(dataset), "output_dir": str(tmp / "out"), **fast}
    assert train("lora", tmp / "straight", **common, max_train_steps=2, output_name="straight", save_every_n_steps=1,
                 save_state=True, sample_every_n_steps=2, **PRESET_LIKE, **lora,
                 sample_prompt_lines=["sks shape --n blurry --w 64 --h 64 --s 2 --l 2"]) == 0
    assert train("lora", tmp / "resumed", **common, max_train_steps=2, output_name="resumed", **lora,
                 resume=str(tmp / "out" / "straight-step00000001-state"), **PRESET_LIKE) == 0
    assert train("finetune", tmp / "finetune", **{**common, "learning_rate": 1e-3}, max_train_steps=2,
                 output_name="finetune", save_model_as="safetensors") == 0
    lora_tensors, metadata = read_lora_file(tmp / "out" / "straight.safetensors")
    return FileRuns(files, tmp / "out", tmp / "straight", lora_tensors, metadata,
                    read_lora_file(tmp / "out" / "resumed.safetensors")[0])


def check_generate_renders_the_lora(runs: FileRuns, tmp_path: Path) -> None:
    """Generate, from the runs' model files, renders the base model and the straight LoRA at weight 1: 64 px images
    that differ."""
    import numpy as np
    from PIL import Image

    from trainers.generate.options import GenerateConfig, LoraRef
    from trainers.generate.plan import Variant, build_plan
    from trainers.generate.renderer import Renderer

    files = {k: v for k, v in runs.files.items() if k != "pretrained_model_name_or_path"}
    cfg = GenerateConfig({"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu",
                          "model": runs.files["pretrained_model_name_or_path"], **files,
                          "prompts": ["sks shape --n blurry --l 2"]})
    variants = [Variant("base"), Variant("w1", (LoraRef(str(runs.out / "straight.safetensors"), 1.0),))]
    plan = build_plan(cfg, tmp_path / "images", 7, variants)
    renderer = Renderer(cfg, "cpu", variants)
    base, one = (np.asarray(Image.open(renderer.render(item)[0]).convert("RGB")).astype(int) for item in plan.items)
    assert base.shape == (64, 64, 3) and np.abs(one - base).max() > 0

