"""Generating images: the same pictures on 1 and 2 workers, PNG parameters, LoRA weights, the prompt cache,
a failing worker, and config errors. CPU, tiny models, 64 px, 2 steps."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trainers.core.options.schema import ConfigError
from trainers.generate.options import GenerateConfig, LoraRef, check_config, load_generate_config, parse_lora_line
from trainers.generate.plan import Variant, build_plan
from trainers.sampling.pnginfo import lora_short_hash, parameters_text, parse_parameters, read_parameters

from helpers import hook_env

REPO = Path(__file__).resolve().parents[2]
FAST = {"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu"}
PROMPTS = ["a red fox --n blurry, lowres", "ünïcode cat 🐈 --w 48 --d 42 --l 5", "a red fox --n blurry, lowres"]


def make_lora(model_dir: Path, path: Path, seed: int) -> Path:
    """A kohya-format LoRA file of the tiny model with random (as if trained) weights."""
    from trainers.methods.lora.file_format import save_lora_file
    from trainers.methods.lora.network import LoRANetwork
    from trainers.models import load_model

    model = load_model(str(model_dir), "auto", torch.float32)
    network = LoRANetwork(model.unet, model.text_encoders, unet_key_style=model.family.unet_key_style,
                          network_dim=4, network_alpha=4)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in network.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    save_lora_file(path, network.kohya_state_dict(torch.float32), {"ss_network_dim": "4"})
    return path


def run_cli(args: list[str], env: dict[str, str] | None = None, command: str = "generate") -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "trainers", command, *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=300)


def run_main(args: list[str], command: str = "generate") -> int:
    """The CLI in this process (no interpreter start-up); spawned workers are still real processes."""
    from trainers.__main__ import main

    return main([command, *args])


def events(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()]


def pixels(path: Path | str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def cli_args(model: Path, job_dir: Path, **values: object) -> list[str]:
    args = ["--model", str(model), "--run-dir", str(job_dir)]
    for prompt in PROMPTS:
        args += ["--prompt", prompt]
    for name, value in {**FAST, **values}.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


@pytest.fixture(scope="module")
def one_worker(tiny_sd1_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference job: one worker (in the CLI's own process), 2 images a prompt in batches of 2."""
    job = tmp_path_factory.mktemp("gen one") / "job ü"
    assert run_main(cli_args(tiny_sd1_dir, job, images_per_prompt=2, batch_size=2)) == 0
    return job


@pytest.mark.slow
def test_images_carry_a1111_parameters_and_the_cache_encodes_each_prompt_once(one_worker: Path,
                                                                              tiny_sd1_dir: Path) -> None:
    evs = events(one_worker)
    images = [e for e in evs if e["type"] == "image"]
    assert [Path(e["path"]).name for e in images] == [
        "000-0000.png", "000-0001.png", "001-0000.png", "001-0001.png", "002-0000.png", "002-0001.png"]
    assert [e["seed"] for e in images] == [0, 1, 42, 43, 0, 1]
    done = evs[-1]
    assert done["type"] == "done" and done["images"] == 6 and done["prompt_encodes"] == 2  # prompt 0 == prompt 2
    progress = [e for e in evs if e["type"] == "generate_progress"]
    assert progress[-1]["done"] == progress[-1]["total"] == 6 and progress[-1]["images_per_s"] > 0
    assert json.loads((one_worker / "status.json").read_text())["state"] == "finished"
    assert "[prompts]" in (one_worker / "config.toml").read_text(encoding="utf-8")

    second = read_parameters(Path(images[3]["path"]))
    assert second == {"prompt": "ünïcode cat 🐈", "negative_prompt": "", "Steps": "2", "Sampler": "Euler a",
                      "CFG scale": "5.0", "Seed": "43", "Size": "48x64", "Model": tiny_sd1_dir.name}
    first = read_parameters(Path(images[0]["path"]))
    assert first["negative_prompt"] == "blurry, lowres" and first["Seed"] == "0" and first["Size"] == "64x64"
    assert pixels(images[2]["path"]).shape == (64, 48, 3)
    np.testing.assert_array_equal(pixels(images[0]["path"]), pixels(images[4]["path"]))  # same prompt, same seed


@pytest.mark.slow
def test_two_workers_make_the_same_images(one_worker: Path, tiny_sd1_dir: Path, tmp_path: Path) -> None:
    job = tmp_path / "two"
    assert run_main(cli_args(tiny_sd1_dir, job, images_per_prompt=2, batch_size=2, num_workers=2)) == 0
    evs = events(job)
    assert next(e for e in evs if e["type"] == "start")["workers"] == ["cpu", "cpu"]
    assert {e["worker"] for e in evs if e["type"] == "image"} <= {0, 1}
    for reference in sorted((one_worker / "images").iterdir()):
        np.testing.assert_array_equal(pixels(job / "images" / reference.name), pixels(reference))
        assert read_parameters(job / "images" / reference.name) == read_parameters(reference)


@pytest.mark.slow
def test_a_failing_worker_is_reported_and_the_job_completes(tiny_sd1_dir: Path, one_worker: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "fail"
    for name, value in hook_env(ATELIER_TEST_FAIL_WORKER="1").items():  # loaded by the spawned worker
        monkeypatch.setenv(name, value)
    assert run_main(cli_args(tiny_sd1_dir, job, images_per_prompt=2, batch_size=2, num_workers=2)) == 0
    evs = events(job)
    [warning] = [e for e in evs if e["type"] == "warning"]
    assert "worker 1 on cpu failed" in warning["message"] and "injected failure" in warning["message"]
    assert len([e for e in evs if e["type"] == "image"]) == 6 and evs[-1]["type"] == "done"
    assert all(e["worker"] == 0 for e in evs if e["type"] == "image")
    for reference in sorted((one_worker / "images").iterdir()):
        np.testing.assert_array_equal(pixels(job / "images" / reference.name), pixels(reference))


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_lora_weight_zero_is_the_base_image_and_one_is_not(family: str, tiny_sd1_dir: Path, tiny_sdxl_dir: Path,
                                                           tmp_path: Path) -> None:
    from trainers.generate.renderer import Renderer

    model = tiny_sd1_dir if family == "sd1" else tiny_sdxl_dir
    lora = make_lora(model, tmp_path / "my lora é.safetensors", seed=1)
    cfg = GenerateConfig({**FAST, "model": str(model), "prompts": ["a red fox --n blurry"]})
    variants = [Variant("base"), Variant("w0", (LoraRef(str(lora), 0.0),)), Variant("w1", (LoraRef(str(lora), 1.0),)),
                Variant("w0 again", (LoraRef(str(lora), 0.0),))]
    plan = build_plan(cfg, tmp_path / "out", 7, variants)
    renderer = Renderer(cfg, "cpu", variants)
    torch.set_flush_denormal(True)
    base, zero, one, zero_again = (pixels(renderer.render(item)[0]) for item in plan.items)
    np.testing.assert_array_equal(zero, base)
    assert np.abs(one.astype(int) - base.astype(int)).mean() > 1
    np.testing.assert_array_equal(zero_again, base)  # unloading the LoRA restores the base exactly
    assert renderer.encodes == 2  # the LoRA changes the text encoder: its prompts are encoded apart
    params = read_parameters(Path(plan.items[2].images[0].path))
    assert params["prompt"] == "a red fox <lora:my lora é:1>"
    assert params["Lora hashes"] == f"my lora é: {lora_short_hash(lora)}"
    assert "Lora hashes" not in read_parameters(Path(plan.items[1].images[0].path))


def test_a_lora_whose_alphas_differ_by_module_renders_at_its_own_strength(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """diffusers alone gives every attention layer a kohya file's most common alpha: a file whose alphas differ by
    module (a dynamic resize, a merge) must render as the same change written with one alpha."""
    from safetensors.torch import load_file, save_file

    from trainers.generate.renderer import Renderer

    state = load_file(make_lora(tiny_sd1_dir, tmp_path / "one alpha.safetensors", seed=3))
    varied = dict(state)
    for index, key in enumerate(sorted(k for k in state if k.endswith(".alpha"))):
        if index % 3 == 0:  # a third of the modules: alpha 1 instead of 4, the same change (up x 4)
            module = key[:-len(".alpha")]
            varied[key] = torch.tensor(1.0)
            varied[f"{module}.lora_up.weight"] = state[f"{module}.lora_up.weight"] * 4
    save_file(varied, tmp_path / "varied.safetensors")
    cfg = GenerateConfig({**FAST, "model": str(tiny_sd1_dir), "prompts": ["a red fox"]})
    variants = [Variant(name, (LoraRef(str(tmp_path / f"{name}.safetensors"), 1.0),)) for name in ("one alpha", "varied")]
    renderer = Renderer(cfg, "cpu", variants)
    same, varied_image = (pixels(renderer.render(item)[0]) for item in build_plan(cfg, tmp_path / "out", 7,
                                                                                  variants).items)
    assert np.abs(same.astype(int) - varied_image.astype(int)).max() <= 1


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_a_lora_with_a_bundled_word_renders_the_word_only_while_it_is_used(family: str, tiny_sd1_dir: Path,
                                                                            tiny_sdxl_dir: Path, tmp_path: Path) -> None:
    """Pivotal tuning's LoRA carries its word (`bundle_emb.<word>.*`, as A1111/Forge read it): Generate loads it,
    prompts with the word change, prompts without it do not, and the base variant reads the word as before."""
    from safetensors.torch import load_file, save_file

    from trainers.generate.renderer import Renderer

    model = tiny_sd1_dir if family == "sd1" else tiny_sdxl_dir
    plain = make_lora(model, tmp_path / "plain.safetensors", seed=5)
    state = load_file(plain)
    folders = ["text_encoder"] if family == "sd1" else ["text_encoder", "text_encoder_2"]
    widths = [json.loads((model / f / "config.json").read_text())["hidden_size"] for f in folders]
    keys = ["string_to_param.*"] if family == "sd1" else ["clip_l", "clip_g"]
    generator = torch.Generator().manual_seed(9)
    bundle = {f"bundle_emb.ohwx.{key}": torch.randn(2, width, generator=generator) * 2
              for key, width in zip(keys, widths)}
    save_file({**state, **bundle}, tmp_path / "pivotal.safetensors")
    cfg = GenerateConfig({**FAST, "model": str(model), "prompts": ["a photo of ohwx", "a red fox"]})
    variants = [Variant("base"), *[Variant(name, (LoraRef(str(tmp_path / f"{name}.safetensors"), 1.0),))
                                   for name in ("plain", "pivotal")], Variant("base again")]
    renderer = Renderer(cfg, "cpu", variants)
    torch.set_flush_denormal(True)
    images = [[pixels(path) for path in renderer.render(item)] for item in build_plan(cfg, tmp_path / "out", 7,
                                                                                        variants).items]
    (base_word, base_fox), (plain_word, plain_fox), (pivotal_word, pivotal_fox), (again_word, again_fox) = \
        [(images[2 * v][0], images[2 * v + 1][0]) for v in range(len(variants))]  # variant by variant, prompt order
    np.testing.assert_array_equal(pivotal_fox, plain_fox)  # no word in the prompt: the bundle changes nothing
    assert np.abs(pivotal_word.astype(int) - plain_word.astype(int)).mean() > 1  # the word's own vectors
    np.testing.assert_array_equal(again_word, base_word)  # without the LoRA the word reads as in the base model
    np.testing.assert_array_equal(again_fox, base_fox)


def test_parameters_text_round_trips() -> None:
    text = parameters_text("a, b\nsecond line", "ugly, blurry", {
        "Steps": 20, "Sampler": "DPM++ 2M", "CFG scale": 7.5, "Seed": 123, "Size": "512x768", "Model": "sd 1.5",
        "Lora hashes": "x: 0123456789ab, y: ba9876543210", "Clip skip": None})
    assert text.splitlines()[-1] == ('Steps: 20, Sampler: DPM++ 2M, CFG scale: 7.5, Seed: 123, Size: 512x768, '
                                     'Model: sd 1.5, Lora hashes: "x: 0123456789ab, y: ba9876543210"')
    assert parse_parameters(text) == {
        "prompt": "a, b\nsecond line", "negative_prompt": "ugly, blurry", "Steps": "20", "Sampler": "DPM++ 2M",
        "CFG scale": "7.5", "Seed": "123", "Size": "512x768", "Model": "sd 1.5",
        "Lora hashes": "x: 0123456789ab, y: ba9876543210"}


def test_config_errors_name_the_field_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "gen.toml").write_text('[prompts]\nprompts = ["a fox"]\nimages_per_promt = 2\n[rendr]\nsteps = 3\n',
                                       encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_generate_config(tmp_path / "gen.toml", ["batch_size=0"])
    text = str(err.value)
    assert "did you mean 'images_per_prompt'" in text and "did you mean [render]" in text
    assert "batch_size: got 0; expected a whole number from 1 to 64" in text
    cfg = load_generate_config(values={"model": str(tmp_path / "missing.safetensors"), "prompts": ["ok --w 33"],
                                       "loras": [f"{tmp_path / 'no.safetensors'}:0.5"], "devices": "gpu0"})
    issues = {i.field: i.message for i in check_config(cfg)}
    assert "missing.safetensors does not exist" in issues["model"]
    assert "no such LoRA file" in issues["loras"]
    assert "line 1: --w '33' must be a multiple of 8" in issues["prompts"]
    assert "write auto, cpu, or GPU ids" in issues["devices"]
    assert parse_lora_line("/x/my:lora.safetensors:0.75") == LoraRef("/x/my:lora.safetensors", 0.75)
    assert parse_lora_line("C:\\loras\\a.safetensors") == LoraRef("C:\\loras\\a.safetensors", 1.0)
    compare = cfg.replace(mode="compare", compare_weights=["x"])
    issues = {i.field: i.message for i in check_config(compare)}
    assert "'x' is not a number" in issues["compare_weights"] and "pick a training run" in issues["compare_run"]


@pytest.mark.slow
def test_cli_reports_config_problems_without_loading_a_model(tmp_path: Path) -> None:
    result = run_cli(["--prompt", "a fox", "--run-dir", str(tmp_path / "job")])
    assert result.returncode == 2
    assert "model: give the base model" in result.stderr
    assert json.loads((tmp_path / "job" / "status.json").read_text())["state"] == "failed"


def test_docs_list_every_generation_option() -> None:
    from trainers.generate.options import options_markdown

    assert options_markdown() in (REPO / "docs" / "generate.md").read_text(encoding="utf-8"), \
        "docs/generate.md is out of date: paste the output of trainers.generate.options.options_markdown()"


@pytest.mark.slow
def test_without_a_size_images_come_at_the_models_own_size(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """The tiny model says 64 px (its UNet's sample size x the VAE's scale): a 512 px default would take minutes."""
    job = tmp_path / "job"
    args = ["--model", str(tiny_sd1_dir), "--run-dir", str(job), "--prompt", "a fox", "--steps", "1",
            "--cpu-threads", "1", "--devices", "cpu"]
    assert run_main(args) == 0
    image = next(e for e in events(job) if e["type"] == "image")
    assert pixels(image["path"]).shape == (64, 64, 3)
