"""End to end: `python -m trainers lora` on tiny models, as a user runs it, and what they get. What does not depend on
the model (processes, stopping, samples, v-prediction and resuming from a LoRA) runs on the tests' fake model family
(tests/fake_family/)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from trainers.demo import build_dataset

from helpers import FAST, REPO, events, fake_family_env, fixed_seed_image, run_trainer, sets, two_processes

pytestmark = pytest.mark.slow  # every test here runs a trainer


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("data with spaces é"), folder="2_sks shape")


@pytest.fixture(scope="module")
def sd1_run(tiny_sd1_dir: Path, dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    base = tmp_path_factory.mktemp("sd1 run ü")
    out = base / "out 'quoted'"
    run_dir = base / "run"
    args = ["--set", f"pretrained_model_name_or_path={json.dumps(str(tiny_sd1_dir))}",
            *sets(train_data_dir=str(dataset), output_dir=str(out), output_name="my lora", max_train_epochs=2,
                  save_every_n_epochs=1, lr_scheduler="cosine", lr_warmup_steps=0.25, logging_dir=str(base / "tb"),
                  conv_dim=2, conv_alpha=1),
            *[a for kv in FAST for a in ("--set", kv)]]
    result = run_trainer(args, run_dir)
    return out, run_dir, result


def test_sd1_lora_trains_and_reports_progress(sd1_run) -> None:
    out, run_dir, result = sd1_run
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(run_dir)
    progress = [e for e in evs if e["type"] == "progress"]
    # 8 images x 2 repeats / batch 2 = 8 steps an epoch, 2 epochs
    assert [e["step"] for e in progress] == list(range(1, 17))
    first = progress[0]
    for key in ("step", "total_steps", "epoch", "loss", "loss_smoothed", "lr", "it_per_s", "images_per_s", "eta_s",
                "peak_mem_gb"):
        assert key in first, key
    assert first["total_steps"] == 16 and progress[-1]["epoch"] == 2
    assert all(torch.isfinite(torch.tensor(e["loss"])) for e in progress)
    assert evs[-1]["type"] == "done" and evs[-1]["output"] == str(out / "my lora.safetensors")
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["exit_code"] == 0
    assert (run_dir / "config.toml").exists()
    checkpoints = [e["path"] for e in evs if e["type"] == "checkpoint"]
    assert checkpoints == [str(out / "my lora-000001.safetensors"), str(out / "my lora.safetensors")]
    assert list((Path(out).parent / "tb").rglob("events.out.tfevents*")), "TensorBoard logs written"


def test_the_panels_planned_and_reported_learning_rates_coincide_step_for_step(sd1_run) -> None:
    from gui.run_files import RunWatcher
    from gui.run_panel import render

    _, run_dir, result = sd1_run
    assert result.returncode == 0, result.stderr[-3000:]
    chart = render(RunWatcher(run_dir).refresh())[4][1].value["data"]  # the run panel's learning-rate chart
    planned = {step: lr for step, lr, series in chart if series == "planned learning_rate"}
    reported = {step: lr for step, lr, series in chart if series == "reported"}
    assert sorted(reported) == sorted(planned) == list(range(1, 17))
    assert [reported[s] for s in range(1, 17)] == pytest.approx([planned[s] for s in range(1, 17)], rel=1e-6)
    assert reported[1] == 0 and reported[5] == pytest.approx(1e-3), "4 warmup steps (0.25 of 16), then cosine"


def test_sd1_lora_file_loads_in_diffusers_and_changes_the_image(sd1_run, tiny_sd1_dir: Path) -> None:
    from diffusers import StableDiffusionPipeline

    out, _, result = sd1_run
    assert result.returncode == 0, result.stderr[-3000:]
    lora = out / "my lora.safetensors"
    with safe_open(str(lora), "pt") as f:
        keys = set(f.keys())
        meta = f.metadata()
    assert "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight" in keys
    assert "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight" in keys
    assert "lora_unet_down_blocks_0_resnets_0_conv1.lora_down.weight" in keys  # LoCon conv_dim
    assert meta["ss_network_dim"] == "4" and meta["ss_base_model_version"] == "sd_v1"
    assert meta["ss_num_epochs"] == "2" and meta["ss_steps"] == "16"
    assert json.loads(meta["ss_dataset_dirs"]) == {"2_sks shape": {"n_repeats": 2, "img_count": 8}}
    pipe = StableDiffusionPipeline.from_pretrained(tiny_sd1_dir)
    base = fixed_seed_image(pipe)
    tuned = fixed_seed_image(pipe, lora)
    assert (base - tuned).abs().max() > 1e-3


def test_sdxl_lora_uses_sgm_names_and_loads(tiny_sdxl_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from diffusers import StableDiffusionXLPipeline

    out = tmp_path / "out"
    args = sets(pretrained_model_name_or_path=str(tiny_sdxl_dir), train_data_dir=str(dataset), output_dir=str(out),
                max_train_steps=3, mixed_precision="bf16", gradient_checkpointing=True, save_precision="bf16")
    result = run_trainer(args + [a for kv in FAST for a in ("--set", kv)], tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    lora = out / "lora.safetensors"
    with safe_open(str(lora), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor(next(iter(keys))).dtype == torch.bfloat16
        assert f.metadata()["ss_base_model_version"] == "sdxl_base_v1-0"
    assert any(k.startswith("lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q") for k in keys)
    assert any(k.startswith("lora_te1_text_model_encoder_layers_0") for k in keys)
    assert any(k.startswith("lora_te2_text_model_encoder_layers_0") for k in keys)
    assert not any("down_blocks" in k for k in keys)
    pipe = StableDiffusionXLPipeline.from_pretrained(tiny_sdxl_dir)
    assert (fixed_seed_image(pipe) - fixed_seed_image(pipe, lora)).abs().max() > 1e-4


def test_an_unknown_option_is_refused_by_the_process_with_the_closest_name(tmp_path: Path) -> None:
    """The process's refusal of a config it cannot read (the other refusals run in process:
    tests/train/test_entry_refusals.py)."""
    result = run_trainer(["--set", "netwrk_dim=4"], tmp_path / "run")
    assert result.returncode == 2 and "did you mean 'network_dim'" in result.stderr


def test_two_processes_train_the_same_images_in_half_the_steps(fake_model_dir: Path, dataset: Path,
                                                                tmp_path: Path) -> None:
    launcher = two_processes()
    args = sets(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset),
                output_dir=str(tmp_path / "o"), max_train_epochs=1, network_train_unet_only=True)
    result = run_trainer(args + [a for kv in FAST for a in ("--set", kv)], tmp_path / "run", launcher,
                         env=fake_family_env(ACCELERATE_USE_CPU="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(tmp_path / "run")
    start = next(e for e in evs if e["type"] == "start")
    assert start["plan"]["num_processes"] == 2 and start["plan"]["global_batch"] == 4
    progress = [e for e in evs if e["type"] == "progress"]
    assert [e["step"] for e in progress] == [1, 2, 3, 4]  # 16 samples / (2 x 2)
    assert (tmp_path / "o" / "lora.safetensors").exists()


def v_prediction_model(folder: Path) -> Path:
    """A fake-family model folder whose scheduler predicts v (as build_tiny_sd1's v_prediction=True)."""
    from tests.fake_family.family import build_fake_model

    model = build_fake_model(folder)
    config = model / "scheduler" / "scheduler_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "prediction_type": "v_prediction"}))
    return model


def test_v_prediction_full_bf16_and_resume_from_lora_weights(dataset: Path, tmp_path: Path) -> None:
    from trainers.methods.lora.file_format import read_lora_file

    model = v_prediction_model(tmp_path / "v-model")
    common = sets(pretrained_model_name_or_path=str(model), train_data_dir=str(dataset),
                  output_dir=str(tmp_path / "o")) + [a for kv in FAST for a in ("--set", kv)]
    env = fake_family_env()
    first = run_trainer(common + sets(max_train_steps=2, mixed_precision="bf16", full_bf16=True), tmp_path / "r1",
                        env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    trained, meta = read_lora_file(tmp_path / "o" / "lora.safetensors")
    assert meta["ss_v_parameterization"] == "True" and meta["modelspec.prediction_type"] == "v"
    assert any(t.abs().sum() > 0 for k, t in trained.items() if k.endswith("lora_up.weight"))

    resumed = run_trainer(common + sets(max_train_steps=1, learning_rate=1e-9, output_name="resumed",  # ~unchanged
                                        network_weights=str(tmp_path / "o" / "lora.safetensors")), tmp_path / "r2",
                          env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again, _ = read_lora_file(tmp_path / "o" / "resumed.safetensors")
    assert again.keys() == trained.keys()
    for key in trained:
        assert torch.allclose(again[key].float(), trained[key].float(), atol=1e-3), key

    wrong_rank = run_trainer(common + sets(max_train_steps=1, network_dim=8, output_name="x",
                                           network_weights=str(tmp_path / "o" / "lora.safetensors")), tmp_path / "r3",
                             env=env)
    assert wrong_rank.returncode == 2 and "network_weights: cannot start from" in wrong_rank.stderr
    assert "rank 4" in wrong_rank.stderr and "Traceback" not in wrong_rank.stderr


def test_stop_request_saves_and_marks_the_run_stopped(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    import time

    from trainers.core.rundir import request

    run_dir = tmp_path / "run"
    steps = 100_000  # the fake model trains hundreds of steps a second: the stop must come first
    args = sets(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset),
                output_dir=str(tmp_path / "o"), max_train_steps=steps)
    cmd = [sys.executable, "-m", "trainers", "lora", "--run-dir", str(run_dir), *args,
           *[a for kv in FAST for a in ("--set", kv)]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **fake_family_env()}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "events.jsonl").exists() or \
            not any(e["type"] == "progress" for e in events(run_dir)):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.2)
    request(run_dir, "save_now")
    request(run_dir, "stop")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped"
    evs = events(run_dir)
    saved = [e["path"] for e in evs if e["type"] == "checkpoint"]
    assert saved and all(Path(p).exists() for p in saved) and "-step" in saved[-1]
    assert evs[-1]["type"] == "done" and evs[-1]["stopped"] is True
    assert max(e["step"] for e in evs if e["type"] == "progress") < steps


def test_sample_images_are_made_and_announced(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from PIL import Image

    prompts = tmp_path / "prompts ü.txt"
    prompts.write_text("# samples\nsks shape, red circle --d 7 --s 2\nblue square --n blurry --w 32 --h 64 --s 2\n",
                       encoding="utf-8")
    args = sets(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset),
                output_dir=str(tmp_path / "o"), max_train_steps=4, sample_prompts=str(prompts),
                sample_every_n_steps=2, sample_at_first=True, sample_sampler="ddim")
    result = run_trainer(args + [a for kv in FAST for a in ("--set", kv)], tmp_path / "run", env=fake_family_env())
    assert result.returncode == 0, result.stderr[-3000:]
    samples = [e for e in events(tmp_path / "run") if e["type"] == "sample"]
    assert [(e["step"], e["index"]) for e in samples] == [(0, 0), (0, 1), (2, 0), (2, 1), (4, 0), (4, 1)]
    for e in samples:
        image = Image.open(e["path"])
        assert image.size == ((32, 64) if e["index"] == 1 else (64, 64))
        assert "Sampler: DDIM" in image.text["parameters"]
    assert Path(samples[0]["path"]).parent == tmp_path / "run" / "samples"
