"""Sample images during training: prompt files, samplers, seeds, ranks, and training left as it was."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trainers.core.prompts import SamplePrompt, parse_prompt_line, parse_prompt_lines, read_prompts
from trainers.methods.lora.network import LoRANetwork
from trainers.models import LoadedModel, load_model
from trainers.models.sd.tiny import build_tiny_sd1
from trainers.sampling.pipeline import (
    SAMPLERS,
    build_pipeline,
    build_scheduler,
    generate_samples,
    sample_event,
    sample_path,
)

PROMPT_LINES = ["a red fox --n blurry, lowres", "ünïcode cat 🐈 --w 48 --h 32 --d 42 --l 5"]


# ---- prompt lines and files -------------------------------------------------------------------

def test_prompt_line_with_every_option() -> None:
    line = "a dog, photo --n blurry, lowres --w 512 --h 768 --d 42 --l 7.5 --s 28"
    assert parse_prompt_line(line, 3) == SamplePrompt(
        "a dog, photo", "blurry, lowres", width=512, height=768, steps=28, seed=42, cfg_scale=7.5, index=3)
    assert parse_prompt_line("--n ugly --S 4", 0) == SamplePrompt("", "ugly", steps=4)  # options ignore case
    assert parse_prompt_line("a cat  --s 4 --cfg 1", 0) == SamplePrompt("a cat", steps=4, cfg_scale=1.0)
    assert parse_prompt_line("rock--paper --n", 0) == SamplePrompt("rock--paper")  # `--` inside a word is text


@pytest.mark.parametrize("line", ["", "   ", "# a comment --w 12", "  # indented comment"])
def test_blank_and_comment_lines_are_skipped(line: str) -> None:
    assert parse_prompt_line(line, 0) is None


@pytest.mark.parametrize(("line", "expected"), [
    ("a cat --w abc", "line 5: --w 'abc' is not a whole number"),
    ("a cat --h 500", "line 5: --h '500' must be a multiple of 8 (e.g. 496 or 504)"),
    ("a cat --s 0", "line 5: --s '0' must be between 1 and 1000"),
    ("a cat --d -1", "line 5: --d '-1' must be between 0"),
    ("a cat --l x7", "line 5: --l 'x7' is not a number"),
    ("a cat --s", "line 5: --s needs a value"),
    ("a cat --ar 16:9", "line 5: unknown option --ar"),
])
def test_bad_option_names_line_option_and_value(line: str, expected: str) -> None:
    with pytest.raises(ValueError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
        parse_prompt_line(line, 0, line_number=5)


def test_inline_prompts_count_only_real_prompts() -> None:
    prompts = parse_prompt_lines(["# samples", "a fox", "", "a cat --d 7"])
    assert [(p.prompt, p.index, p.seed) for p in prompts] == [("a fox", 0, None), ("a cat", 1, 7)]
    with pytest.raises(ValueError, match="^line 3: --w"):
        parse_prompt_lines(["a fox", "# x", "a cat --w big"])


def test_prompts_file_reads_unicode_and_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "prompts.txt"
    path.write_bytes("\ufeff# comment\r\nélan vital, 水彩 --n 低品質\r\n\r\nzwei --w 64\r\n".encode())
    prompts = read_prompts(path)
    assert [(p.prompt, p.negative, p.width, p.index) for p in prompts] == [
        ("élan vital, 水彩", "低品質", None, 0), ("zwei", "", 64, 1)]
    path.write_text("ok\n# fine\nbad --d seed\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"prompts\.txt: line 3: --d 'seed'"):
        read_prompts(path)
    path.write_bytes(b"ok\n\xff\xfe bad\n")
    with pytest.raises(ValueError, match=r"prompts\.txt: line 2: not UTF-8"):
        read_prompts(path)


# ---- rendering on the tiny models ------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def fast_cpu() -> Iterator[None]:
    """Flush denormals (random tiny weights make them; they slow CPU math 5-20x), one thread.

    On a small shared machine a second OpenMP thread makes these tiny convolutions several times
    slower, not faster (and set_flush_denormal applies to the calling thread only).
    """
    threads = torch.get_num_threads()
    torch.set_flush_denormal(True)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models(tiny_sd1_dir: Path, tiny_sdxl_dir: Path) -> dict[str, LoadedModel]:
    return {name: load_model(str(folder), "auto", torch.float32)
            for name, folder in (("sd1", tiny_sd1_dir), ("sdxl", tiny_sdxl_dir))}


def render(model: LoadedModel, out_dir: Path, prompts: list[SamplePrompt] | None = None, **kwargs) -> list[Path]:
    options = {"sampler": "euler_a", "default_size": (64, 64), "default_steps": 2, **kwargs}
    return generate_samples(model, prompts or parse_prompt_lines(PROMPT_LINES), out_dir, "s", **options)


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_every_sampler_writes_pngs_with_parameters(models: dict[str, LoadedModel], tmp_path: Path,
                                                   family: str, sampler: str) -> None:
    paths = render(models[family], tmp_path, sampler=sampler, base_seed=100)
    assert paths == [tmp_path / "s_00.png", tmp_path / "s_01.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s_00.png", "s_01.png"]  # no temp files left
    title = {"ddim": "DDIM", "euler": "Euler", "euler_a": "Euler a", "dpmpp_2m": "DPM++ 2M"}[sampler]
    with Image.open(paths[0]) as first, Image.open(paths[1]) as second:
        assert first.size == (64, 64) and second.size == (48, 32)
        assert first.text["parameters"] == (
            f"a red fox\nNegative prompt: blurry, lowres\n"
            f"Steps: 2, Sampler: {title}, CFG scale: 7.0, Seed: 100, Size: 64x64")
        assert second.text["parameters"] == (
            f"ünïcode cat 🐈\nSteps: 2, Sampler: {title}, CFG scale: 5.0, Seed: 42, Size: 48x32")
    assert pixels(paths[0]).std() > 0


def test_ranks_split_prompts_and_match_one_process(models: dict[str, LoadedModel], tmp_path: Path) -> None:
    prompts = parse_prompt_lines(PROMPT_LINES + ["a third one --w 32 --h 32"])
    single = render(models["sd1"], tmp_path / "one", prompts)
    rank0 = render(models["sd1"], tmp_path / "two", prompts, rank=0, world_size=2)
    rank1 = render(models["sd1"], tmp_path / "two", prompts, rank=1, world_size=2)
    assert [p.name for p in rank0] == ["s_00.png", "s_02.png"] and [p.name for p in rank1] == ["s_01.png"]
    assert sorted(p.name for p in rank0 + rank1) == [p.name for p in single]
    for path in single:  # same seed, same picture: seeds depend on the prompt, not on the process count
        np.testing.assert_array_equal(pixels(path), pixels(tmp_path / "two" / path.name))
    assert [sample_path(tmp_path / "two", "s", p) for p in prompts] == sorted(rank0 + rank1)


def test_seed_decides_the_image(models: dict[str, LoadedModel], tmp_path: Path) -> None:
    prompt = parse_prompt_lines(["a red fox --s 1"])
    first, again = (render(models["sdxl"], tmp_path / d, prompt, base_seed=5)[0] for d in ("a", "b"))
    other = render(models["sdxl"], tmp_path / "c", prompt, base_seed=6)[0]
    np.testing.assert_array_equal(pixels(first), pixels(again))
    assert not np.array_equal(pixels(first), pixels(other))


def test_training_state_is_left_as_it_was(models: dict[str, LoadedModel], tmp_path: Path) -> None:
    model = models["sd1"]
    model.unet.train()
    model.text_encoders[0].train()
    model.vae.eval()
    next(model.unet.children()).eval()  # a mixed state must come back exactly
    modules = [model.unet, model.vae, *model.text_encoders]
    flags = [m.training for root in modules for m in root.modules()]
    torch.manual_seed(1234)
    rng = torch.get_rng_state()
    scheduler_config = dict(model.noise_scheduler.config)

    render(model, tmp_path, parse_prompt_lines(["a red fox --s 1"]), sampler="euler_a")

    assert [m.training for root in modules for m in root.modules()] == flags
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.is_grad_enabled()
    assert dict(model.noise_scheduler.config) == scheduler_config
    assert build_pipeline(model, "ddim").scheduler is not model.noise_scheduler
    model.unet.eval()
    model.text_encoders[0].eval()


def test_samples_show_the_trained_lora(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)  # its own copy: the hooks stay on it
    prompt = parse_prompt_lines(["a red fox --s 1 --w 32 --h 32"])
    before = pixels(render(model, tmp_path / "before", prompt)[0])
    network = LoRANetwork(model.unet, model.text_encoders, unet_key_style="diffusers", network_dim=4, network_alpha=4)
    for param in network.parameters():
        torch.nn.init.normal_(param, std=0.3)  # as if trained: lora_up starts at zero
    network.apply_to()
    with_lora = pixels(render(model, tmp_path / "lora", prompt)[0])
    network.set_multiplier(0.0)
    without = pixels(render(model, tmp_path / "off", prompt)[0])
    assert not np.array_equal(with_lora, before)
    np.testing.assert_array_equal(without, before)


def test_v_prediction_model_samples(tmp_path: Path) -> None:
    model = load_model(str(build_tiny_sd1(tmp_path / "v", v_prediction=True)), "auto", torch.float32)
    assert {build_scheduler(model, s).config.prediction_type for s in SAMPLERS} == {"v_prediction"}
    [path] = render(model, tmp_path / "out", parse_prompt_lines(["a red fox --s 2 --w 32"]), sampler="dpmpp_2m")
    assert pixels(path).shape == (64, 32, 3)


def test_unknown_sampler_and_sample_event(models: dict[str, LoadedModel], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown sampler 'k_lms'; choose one of ddim, euler, euler_a, dpmpp_2m"):
        render(models["sd1"], tmp_path, sampler="k_lms")
    prompt = parse_prompt_lines(["x", "a fox --n ugly"])[1]
    path = sample_path(tmp_path, "step00000010", prompt)
    assert path == tmp_path / "step00000010_01.png"
    assert sample_event(path, prompt, step=10, epoch=2).to_json() == {
        "path": str(path), "prompt": "a fox", "step": 10, "epoch": 2, "index": 1}


def test_sample_prompts_are_encoded_with_the_captions_when_those_are_cached(tiny_sd1_dir: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With cache_text_encoder_outputs the text encoders leave the device after caching; the sample prompts are
    encoded then too, so sampling runs no text encoder (a T5-XXL on the CPU would take seconds a prompt), and the
    samples are the ones the encoders would give."""
    from helpers import events, train

    from trainers.demo import build_dataset
    from trainers.models.sd.family import SD1
    from trainers.sampling import pipeline

    during_samples: list[int] = []
    sampling = [False]
    real_generate, real_encode = pipeline.generate_samples, type(SD1).encode_prompts

    def generate(*args, **kwargs):  # type: ignore[no-untyped-def]
        sampling[0] = True
        try:
            return real_generate(*args, **kwargs)
        finally:
            sampling[0] = False

    def encode(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if sampling[0]:
            during_samples.append(1)
        return real_encode(self, *args, **kwargs)

    monkeypatch.setattr(pipeline, "generate_samples", generate)
    monkeypatch.setattr(type(SD1), "encode_prompts", encode)
    images = {}
    for cached in (True, False):
        during_samples.clear()
        run = tmp_path / f"cached {cached}"
        assert train("lora", run, pretrained_model_name_or_path=str(tiny_sd1_dir),
                     train_data_dir=str(build_dataset(tmp_path / "data")), output_dir=str(run / "out"),
                     resolution="64", max_train_steps=1, max_data_loader_n_workers=0, network_train_unet_only=True,
                     cache_text_encoder_outputs=cached, sample_every_n_steps=1,
                     sample_prompt_lines=["sks shape, red circle --n blurry --w 64 --h 64 --s 2 --d 1"]) == 0
        assert bool(during_samples) != cached
        path = next(e["path"] for e in events(run) if e["type"] == "sample")
        images[cached] = np.asarray(Image.open(path)).astype(int)
    assert np.abs(images[True] - images[False]).max() <= 1
