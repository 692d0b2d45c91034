"""Generate renders video: a video family's model (the tiny Wan 2.1 of its real diffusers classes) and a LoRA in Wan's
naming render mp4 clips of the frames asked (--f, the frames option, else the family's), their parameters in the
container's comment; a compare over a video run's saves is a grid of poster frames with each cell's clip beside it.
CPU, 64 px, 2 steps, in this process (one worker)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import toml
import torch

from trainers.generate.grid import read_grid_layout
from trainers.generate.options import GenerateConfig, check_config
from trainers.generate.plan import build_plan
from trainers.generate.video import is_video_model
from trainers.models.wan.tiny import build_tiny_wan

from test_generate import events, run_main

FAST = {"width": 64, "height": 64, "steps": 2, "cpu_threads": 1, "devices": "cpu"}


@pytest.fixture(scope="module")
def wan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_wan(tmp_path_factory.mktemp("wan") / "model")


def wan_lora(model_dir: Path, path: Path, seed: int) -> Path:
    """A LoRA of the tiny Wan in its files' naming (musubi-tuner's lora_unet_blocks_*), random as if trained."""
    from types import SimpleNamespace

    from trainers.methods.lora.file_format import save_lora_file
    from trainers.methods.lora.network import LoRANetwork
    from trainers.models import load_model

    model = load_model(str(model_dir), "auto", torch.float32)
    targets = model.family.lora_targets(model.unet)
    network = LoRANetwork(model.unet, [], unet_key_style="own", network_dim=4, network_alpha=4,
                          train_text_encoder=False, unet_targets=targets,
                          target_dims=model.family.lora_target_dims(targets, {}, 4))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in network.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    view = SimpleNamespace(unet=model.unet, text_encoders=[], family=model.family)
    save_lora_file(path, model.family.lora_file(network.kohya_state_dict(torch.float32), view),
                   {"ss_network_dim": "4"})
    return path


def clip(path: Path | str) -> tuple[np.ndarray, dict[str, str], float]:
    """(frames (F, H, W, 3), the container's metadata, its frame rate)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(stream)])
        return frames, dict(container.metadata), float(stream.average_rate)


def args_of(model: Path, job: Path, prompts: list[str], **values: object) -> list[str]:
    args = ["--model", str(model), "--run-dir", str(job)]
    for prompt in prompts:
        args += ["--prompt", prompt]
    for name, value in {**FAST, **values}.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def test_a_video_model_is_told_before_loading_and_its_plan_names_clips(wan: Path, tmp_path: Path) -> None:
    assert is_video_model(str(wan)) and not is_video_model(str(tmp_path))
    cfg = GenerateConfig({"model": str(wan), "prompts": ["a fox --f 5", "a cat"], "frames": 9})
    plan = build_plan(cfg, tmp_path, 0)
    assert [Path(i.images[0].path).suffix for i in plan.items] == [".mp4", ".mp4"]
    assert [i.frames for i in plan.items] == [5, 9]  # the prompt's --f, else the job's frames
    bad = GenerateConfig({"model": str(wan), "prompts": ["a fox --f 6"], "frames": 8})
    issues = {i.field: i.message for i in check_config(bad)}
    assert "1 + 4k frames" in issues["frames"] and "(e.g. 5 or 9)" in issues["frames"]
    assert "prompt 1: --f 6" in issues["prompts"]


def test_generate_renders_clips_and_a_wan_lora_changes_them(wan: Path, tmp_path: Path) -> None:
    from trainers.models.wan.rules import WAN21

    lora = wan_lora(wan, tmp_path / "fox lora.safetensors", seed=1)
    prompts = ["a red fox --n blurry --f 5 --d 3", "a cat running"]
    base, with_lora = tmp_path / "base", tmp_path / "lora"
    assert run_main(args_of(wan, base, prompts)) == 0
    assert run_main(args_of(wan, with_lora, prompts, lora=f"{lora}:1")) == 0
    shown = [e["path"] for e in events(base) if e["type"] == "image"]
    assert [Path(p).name for p in shown] == ["000-0000.mp4", "001-0000.mp4"]
    fox, meta, fps = clip(shown[0])
    assert fox.shape == (5, 64, 64, 3) and fps == WAN21.frame_rate
    assert meta["comment"].startswith("a red fox\nNegative prompt: blurry\nSteps: 2")
    assert "Frames: 5" in meta["comment"] and "Seed: 3" in meta["comment"]
    cat, _, _ = clip(shown[1])
    assert cat.shape[0] == 17  # no --f nor frames: the family's sample length
    lora_fox, lora_meta, _ = clip(with_lora / "images" / "000-0000.mp4")
    assert lora_fox.shape == fox.shape and np.abs(lora_fox.astype(int) - fox.astype(int)).mean() > 1
    assert "<lora:fox lora:1>" in lora_meta["comment"] and "Lora hashes: " in lora_meta["comment"]
    import gradio as gr

    from gui.generate_tab import JobWatcher

    view = JobWatcher(base).refresh()  # what the tab's gallery is given: it plays them
    shown = gr.Gallery().postprocess([view.images[k] for k in sorted(view.images)]).root
    assert [item.video.mime_type for item in shown if item.video is not None] == ["video/mp4"] * 2


def test_a_compare_over_a_video_runs_saves_is_a_poster_grid_with_each_cells_clip(wan: Path,
                                                                                tmp_path: Path) -> None:
    run, out = tmp_path / "runs" / "20260101-lora-fox", tmp_path / "out"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(toml.dumps({
        "method": "lora", "model": {"pretrained_model_name_or_path": str(wan)},
        "sampling": {"sample_prompt_lines": ["a red fox --f 5", "a bird --f 5 --d 7"], "sample_sampler": "euler"},
        "saving": {"output_dir": str(out), "output_name": "fox"}}), encoding="utf-8")
    lines = []
    for step, name in ((2, "fox-000002.safetensors"), (4, "fox.safetensors")):
        wan_lora(wan, out / name, seed=step)
        lines.append(json.dumps({"type": "checkpoint", "path": str(out / name), "epoch": 1, "step": step,
                                 "final": step == 4}))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora"}), encoding="utf-8")
    job = tmp_path / "job"
    args = ["--compare-run", str(run), "--seed", "42", "--run-dir", str(job)]
    for name, value in FAST.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    assert run_main(args, command="compare") == 0
    grid_event = next(e for e in events(job) if e["type"] == "grid")
    assert len(grid_event["rows"]) == 2 and grid_event["rows"][-1] == "final" and len(grid_event["columns"]) == 2
    copy = Path(grid_event["copy"])
    layout = read_grid_layout(copy)
    clips = [p for line in layout["clips"] for p in line]
    assert len(clips) == 4 and all(Path(p).parent == copy.with_suffix("") and Path(p).suffix == ".mp4"
                                   for p in clips)
    assert all(Path(p).is_file() for p in clips) and layout["cell_size"] == [64, 64]
    posters = [p for line in layout["cells"] for p in line]
    assert all(p.endswith(".poster.png") and Path(p).is_file() for p in posters)
    frames, _, _ = clip(clips[0])
    assert frames.shape[0] == 5
    from PIL import Image

    with Image.open(posters[0]) as poster:  # the clip's middle frame (decoded again: within the codec's loss)
        assert np.abs(np.asarray(poster.convert("RGB")).astype(int) - frames[2].astype(int)).mean() < 1
    job_layout = read_grid_layout(job / "grid.png")
    assert [Path(p).parent for line in job_layout["clips"] for p in line] == [job / "images"] * 4


def test_a_training_sample_prompts_f_sets_its_clips_frames(wan: Path, tmp_path: Path) -> None:
    from trainers.core.prompts import config_prompts
    from trainers.models import load_model
    from trainers.sampling.pipeline import generate_samples

    model = load_model(str(wan), "auto", torch.float32)
    prompts = config_prompts("", ["a red fox --w 64 --h 64 --s 2 --d 3 --f 9"])
    (written,) = generate_samples(model, prompts, tmp_path, "step2", default_size=(64, 64), default_steps=2)
    assert clip(written)[0].shape[0] == 9
    with pytest.raises(ValueError, match="1 \\+ 4k frames; 8 is not one"):
        generate_samples(model, config_prompts("", ["a fox --f 8"]), tmp_path, "step3", default_size=(64, 64),
                         default_steps=2)


def test_the_generate_tab_offers_the_frames_field_for_a_video_model_only(wan: Path, tmp_path: Path) -> None:
    from types import SimpleNamespace

    import gradio as gr

    from gui.generate_tab import build_generate_tab, shows_frames
    from gui.run_files import Watchers

    services = SimpleNamespace(runs_dir=tmp_path, jobs=None, queue=None, allowed_roots=None,
                               watchers=Watchers(min_interval_s=0))
    with gr.Blocks() as blocks:
        build_generate_tab(services)
    frames = next(b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "gen-frames")
    assert frames.visible is False  # no model yet
    (on_change, *_) = [f.fn for f in blocks.fns.values() if f.fn.__module__ == "gui.generate_tab"
                       and frames._id in [o._id for o in f.outputs]]
    assert on_change(str(wan), "auto")["visible"] is True
    assert on_change(str(tmp_path), "auto")["visible"] is False  # no model there
    assert on_change("", "wan21")["visible"] is True  # the family set: no file read
    assert not shows_frames(str(wan), "auto", [tmp_path])  # outside the allowed roots: not looked at
