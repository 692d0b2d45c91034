"""benchmarks/gpu_check.py: the prepared GPU check. Its dry run (the same code, tiny models, on the CPU) must report
every part with finite numbers, so the one GPU call cannot fail on a typo; a part that fails or runs long is
reported and the others still run."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_runner import Part, PartContext, Skip, run_parts
from tests.helpers import REPO

TRAINING = ("steps_per_s", "s_per_step", "images_per_s", "tflop_per_step", "mfu", "peak_allocated_gb", "loss_last",
            "setup_s", "estimate_gb")
GENERATION = ("atelier_images_per_s", "diffusers_images_per_s", "atelier_vs_diffusers")


def _measures(ctx: PartContext) -> None:
    ctx.report(value=1.5)


def _raises(ctx: PartContext) -> None:
    ctx.report(before=1)
    raise ValueError("a bad config value")


def _runs_long(ctx: PartContext) -> None:
    ctx.report(steps_per_s=2.0)
    ctx.phase("training")
    time.sleep(60)


def _dies(ctx: PartContext) -> None:
    os._exit(3)  # as a process the kernel kills for memory


def _skips(ctx: PartContext) -> None:
    raise Skip("no script given")


def test_a_part_that_fails_or_runs_past_its_budget_is_reported_and_the_others_still_run() -> None:
    parts = [Part("raises", "", 30, _raises), Part("long", "", 2, _runs_long), Part("dies", "", 30, _dies),
             Part("skips", "", 30, _skips), Part("fine", "", 30, _measures)]
    started = time.monotonic()
    results = {r["name"]: r for r in run_parts(parts, settings=None, total_s=120)}
    assert time.monotonic() - started < 30  # the long part was cut at its budget, not waited for
    assert results["raises"]["status"] == "error" and "ValueError: a bad config value" in results["raises"]["error"]
    assert results["raises"]["before"] == 1  # what it measured before failing is kept
    assert results["long"]["status"] == "cut"
    assert results["long"]["note"] == "over its 2 s budget while training"
    assert results["long"]["steps_per_s"] == 2.0
    assert results["dies"]["status"] == "error" and "exit code 3" in results["dies"]["error"]
    assert results["skips"]["status"] == "skipped" and results["skips"]["note"] == "no script given"
    assert results["fine"]["status"] == "ok" and results["fine"]["value"] == 1.5


def test_parts_past_the_whole_runs_time_are_listed_as_not_run() -> None:
    parts = [Part("long", "", 3, _runs_long), Part("next", "", 30, _measures)]
    results = run_parts(parts, settings=None, total_s=22)
    assert [r["status"] for r in results] == ["cut", "not run"]
    assert "22 s" in results[1]["note"]


@pytest.fixture
def real_folders(tmp_path: Path) -> dict[str, Path]:
    from benchmarks.gpu_models import FAMILIES, model_folder

    return {family: model_folder(family, tmp_path, tiny=False) for family in FAMILIES}


def test_the_real_size_models_are_the_published_architectures(real_folders: dict[str, Path]) -> None:
    """The folders the GPU run trains from, built on the meta device through the trainers' own loader: a typo in
    FLUX.1-dev's configs (written in code) or a lost SD config shows here, not on the GPU."""
    from benchmarks.gpu_models import component_params

    counts = {family: component_params(folder) for family, folder in real_folders.items()}
    clip_l, vae = 123_060_480, 83_653_863  # ../shared/arch/README.md's counts for SD1.5 and SDXL
    assert counts["sd15"] == {"denoiser": 859_520_964, "vae": vae, "text_encoder_1": clip_l}
    assert counts["sdxl"] == {"denoiser": 2_567_463_684, "vae": vae, "text_encoder_1": clip_l,
                              "text_encoder_2": 694_659_840}
    # FLUX.1-dev: the transformer 11.9 B (flux1-dev.safetensors), its 16-channel autoencoder, CLIP-L, T5-XXL's encoder
    assert counts["flux"] == {"denoiser": 11_901_408_320, "vae": 83_819_683, "text_encoder_1": clip_l,
                              "text_encoder_2": 4_762_310_656}
    # Wan 2.2 TI2V 5B: the sizes the memory estimate states for it (its rules' and memory_facts' published counts)
    from trainers.core.memory_facts import UMT5_XXL, WAN22_VAE
    from trainers.models.wan.ti2v.rules import TI2V_5B

    assert counts["wan22_ti2v"] == {"denoiser": TI2V_5B, "vae": WAN22_VAE, "text_encoder_1": UMT5_XXL}
    from trainers.core.memory_facts import QWEN3_4B, QWEN25_VL_7B, QWEN_IMAGE_VAE
    from trainers.models.qwen_image.rules import QwenImageRules
    from trainers.models.zimage.rules import ZImageRules

    assert counts["zimage"] == {"denoiser": ZImageRules.memory_facts.denoiser, "vae": 83_819_683,
                                "text_encoder_1": QWEN3_4B}
    assert counts["qwen_image"] == {"denoiser": QwenImageRules.memory_facts.denoiser, "vae": QWEN_IMAGE_VAE,
                                    "text_encoder_1": QWEN25_VL_7B}


def test_the_real_size_runs_pass_the_trainers_checks(tmp_path: Path) -> None:
    """Every training part's config at real size, with its config-only model folder, as the run checks it before
    loading anything (the dry run loads tiny models, whose folders hold weights)."""
    from benchmarks.gpu_parts import REAL, Sizes, TrainRun
    from trainers.demo import build_dataset
    from trainers.train.optim import check_optimizer
    from trainers.preflight.validate import check

    sizes = Sizes(**REAL, work=tmp_path)
    images = build_dataset(tmp_path / "data", folder="100_bench", size=64)
    runs = [part.run for part in gpu_check.parts(sizes) if isinstance(part.run, TrainRun)]
    assert len(runs) == 14
    for run in runs:
        data = run.dataset(sizes, tmp_path / "clips") if run.spec.video else images  # 832x480, 49 frames
        cfg = run.config(sizes, data, tmp_path / "out")
        check(cfg)  # raises ConfigError naming each problem
        check_optimizer(cfg)
        assert cfg.max_train_steps == 14 and cfg.mixed_precision == "bf16"
    preset = next(r for r in runs if r.spec.family == "qwen_image").config(sizes, images, tmp_path / "out")
    assert (preset.fp8_base, preset.blocks_to_swap, preset.network_dim, preset.resolution) == (True, 16, 16, "1024")


def test_the_sharded_parts_launch_each_backend_with_its_accelerate_config(tmp_path: Path) -> None:
    """DeepSpeed ZeRO-3, ZeRO-2 with optimizer offload and FSDP2 at real size: their configs pass the trainers'
    checks and each launch carries the run's accelerate.yaml of its backend (the dry run launches none of them)."""
    import yaml

    from benchmarks.gpu_parts import REAL, Sizes
    from benchmarks.gpu_sharded import ShardedRun
    from trainers.demo import build_dataset

    sizes = Sizes(**REAL, work=tmp_path)
    data = build_dataset(tmp_path / "data", folder="100_bench", size=64)
    runs = {p.name: p.run for p in gpu_check.parts(sizes) if isinstance(p.run, ShardedRun)}
    launched = {}
    for name, run in runs.items():
        command = run.command(run.values(sizes, data, tmp_path / name / "out"), tmp_path / name)
        config = command[command.index("--config_file") + 1] if "--config_file" in command else None
        launched[name] = yaml.safe_load(Path(config).read_text())["distributed_type"] if config else "plain"
        assert command[-3:] == ["benchmarks.gpu_sharded", str(tmp_path / name / "values.json"), str(tmp_path / name)]
    assert launched == {"sharded-baseline": "plain", "sharded-fsdp2": "FSDP", "sharded-zero2-offload": "DEEPSPEED",
                        "sharded-zero3": "DEEPSPEED"}
    zero2 = yaml.safe_load((tmp_path / "sharded-zero2-offload" / "accelerate.yaml").read_text())
    assert zero2["deepspeed_config"]["offload_optimizer_device"] == "cpu"
    assert yaml.safe_load((tmp_path / "sharded-zero3" / "accelerate.yaml").read_text())[
        "deepspeed_config"]["zero_stage"] == 3
    # ZeRO-3 saves its training state halfway, which a second launch resumes (its states run on GPUs only)
    zero3 = json.loads((tmp_path / "sharded-zero3" / "values.json").read_text())
    assert (zero3["save_state"], zero3["save_every_n_steps"]) == (True, zero3["max_train_steps"] // 2)


def _result(parts: list[dict]) -> dict:
    return {"dry_run": False, "date": "2026-11-26T10:00:00", "commit": "abc1234", "total_s": 412.0,
            "environment": {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "torch_cuda": "13.0",
                            "python": "3.12.3", "peak_bf16_tflops": 989.4, "peak_source": "data sheet (dense bf16)",
                            "matmul_bf16_tflops": 790.1},
            "parts": parts}


def test_the_table_names_the_compass_figures_and_replaces_the_docs_gpu_section(tmp_path: Path) -> None:
    parts = [{"name": "sdxl-lora-bs1", "what": "SDXL LoRA 1024 px, batch 1", "status": "ok", "s_per_step": 0.41,
              "steps_per_s": 2.44, "mfu": 0.312, "peak_allocated_gb": 14.2, "estimate_gb": 13.04, "loss_finite": True,
              "saved_loads": True},
             {"name": "flux-lora-fp8", "what": "FLUX.1-dev LoRA 512 px, fp8 base", "status": "ok",
              "peak_allocated_gb": 16.84, "steps_per_s": 1.9, "loss_finite": True, "saved_loads": False},
             {"name": "flux-lora-bf16-swap", "what": "FLUX.1-dev LoRA 512 px", "status": "cut",
              "note": "over its 100 s budget while training"},
             {"name": "generate-sdxl", "what": "SDXL 1024 px", "status": "ok", "atelier_images_per_s": 0.52,
              "diffusers_images_per_s": 0.5, "atelier_vs_diffusers": 1.04, "lora_renders": True},
             {"name": "sharded-zero3", "what": "ZeRO-3", "status": "ok", "s_per_step": 0.25, "peak_allocated_gb": 9.1,
              "speed_vs_one_process": 0.8, "memory_vs_one_process": 0.65, "loss_worst_rel_diff": 0.0123,
              "losses_match": False, "resume_matches": True}]
    text = gpu_check.markdown(_result(parts))
    assert "| sharded-zero3 | ZeRO-3 | 0.250 | 0.80 | 9.10 | 0.65 | 0.0123 | **NO** | yes | ok |" in text
    assert "**SDXL LoRA 1024 px, batch 1**: 0.41 s/it (2.44 it/s), MFU 31.2 %" in text
    assert "fp8 16.8 GB (1.90 it/s)" in text and "bf16-swap – (– it/s)" in text
    assert "against the estimate**: sdxl-lora-bs1 14.2 / 13.0 GB" in text  # the FLUX part has no estimate: left out
    assert "| **NO** |" in text  # the FLUX fp8 LoRA that did not load back stands out
    assert "cut: over its 100 s budget while training" in text
    assert "| generate-sdxl | SDXL 1024 px | 0.520 | 0.500 | 1.04 | yes | ok |" in text

    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\n## Side by side\n\ntext\n", encoding="utf-8")
    result_file = tmp_path / "gpu_check.json"
    result_file.write_text(json.dumps(_result(parts)), encoding="utf-8")
    for _ in range(2):  # a second write replaces the first
        gpu_check.write_docs(gpu_check.markdown(json.loads(result_file.read_text())), doc)
    written = doc.read_text(encoding="utf-8")
    assert written.startswith("# Performance\n\n## Side by side\n\ntext\n\n## GPU\n")
    assert written.count(gpu_check.BEGIN) == 1 and written.count("0.41 s/it") == 1


def test_missing_packages_are_named_with_how_to_carry_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = gpu_check.packages

    def without_diffusers() -> dict:
        listed = real()
        listed["diffusers"]["installed"] = None
        return listed

    monkeypatch.setattr(gpu_check, "packages", without_diffusers)
    assert gpu_check.main(["--out", str(tmp_path), "--work", str(tmp_path)]) == 2
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["environment"]["error"].startswith("missing packages: diffusers; carry them as wheels")


@pytest.mark.slow
@pytest.mark.long
def test_dry_run_reports_every_part_with_finite_numbers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out),
                           "--work", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1500)
    assert (out / "gpu_check.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    parts = {p["name"]: p for p in result["parts"]}
    expected = [p.name for p in gpu_check.parts(gpu_check_sizes())]
    assert list(parts) == expected
    skipped = {name for name in parts if name == "side-by-side" or name.startswith(gpu_check.SHARDED)}
    problems = {name: p.get("error") or p.get("note") for name, p in parts.items()
                if p["status"] != ("skipped" if name in skipped else "ok")}
    assert problems == {}
    assert all("passed Validate" in parts[name]["note"] for name in skipped - {"side-by-side"})
    for name, p in parts.items():
        numbers = TRAINING if "lora" in name or "finetune" in name else GENERATION if "generate" in name else ()
        bad = {key: p.get(key) for key in numbers if not (isinstance(p.get(key), (int, float)) and
                                                          math.isfinite(p[key]) and p[key] > 0)}
        assert bad == {}, name
        if numbers is TRAINING:
            assert p["loss_finite"] is True and p["saved_loads"] is True, name
        if numbers is GENERATION:
            assert p["lora_renders"] is True, name
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| sdxl-lora-bs1 |" in (out / "gpu_check.md").read_text()


def gpu_check_sizes():
    from benchmarks.gpu_parts import DRY, Sizes

    return Sizes(**DRY)


def test_the_first_call_runs_issue_42s_figures_first_within_its_time() -> None:
    """SDXL at batch 4, then FLUX.1, Z-Image and Qwen-Image against the estimate: first, and within the 420 s."""
    from benchmarks.gpu_parts import REAL, Sizes

    listed = gpu_check.parts(Sizes(**REAL))
    first = ["sdxl-lora-bs4", "flux-lora-bf16", "zimage-lora-24gb", "qwen-image-lora-24gb"]
    assert [p.name for p in listed[:4]] == first
    assert sum(p.budget_s for p in listed[:4]) <= gpu_check.TOTAL_S
    generate = [i for i, p in enumerate(listed) if p.name == "generate-sdxl"][0]
    assert [p.name for p in listed].index("sdxl-lora-bs1") < generate  # it renders that part's LoRA
