"""The natural-language captioners (tiny random-init Florence-2, BLIP, Qwen2.5-VL and LLaVA, JoyCaption's class) and
the mask models (tiny CLIPSeg) end to end through `python -m trainers caption|masks`; a job killed mid-way leaves its
finished files whole and the others untouched."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.caption.conftest import REPO, image_folder, run_job
from trainers.caption.cli import _run
from trainers.caption.options import config_from_values
from trainers.core.options import TrainConfig
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("captioner", ["florence2", "blip", "joycaption", "qwen2_5_vl"])  # Qwen without torchvision
def test_a_vision_language_captioner_writes_every_caption(captioner: str, tmp_path: Path,
                                                          tiny_models: dict[str, Path]) -> None:
    images = image_folder(tmp_path / "data", count=3, broken=True)
    cfg = config_from_values("caption", {"images": str(images), "captioner": captioner, "device": "cpu",
                                         "model": str(tiny_models[captioner]), "trigger_word": "sks", "batch_size": 2,
                                         "max_new_tokens": 6, "caption_extension": ".caption"})
    _run(cfg, tmp_path / "job", None)  # in this process (the command line is run by the tests below)
    written = sorted(images.rglob("*.caption"))
    assert [p.stem for p in written] == ["00_red", "01_blue", "02_green"]
    for path in written:
        text = path.read_text(encoding="utf-8").strip()
        assert text.startswith("sks, ") and len(text) > len("sks, ")
    progress = [json.loads(line) for line in (tmp_path / "job" / "events.jsonl").read_text().splitlines()
                if '"images_progress"' in line]
    assert progress[-1]["done"] == progress[-1]["total"] == 4 and progress[-1]["unreadable"] == 1
    assert progress[-1]["images_per_s"] > 0


def test_a_killed_job_leaves_finished_captions_whole_and_the_rest_untouched(tmp_path: Path,
                                                                             tiny_models: dict[str, Path]) -> None:
    images = image_folder(tmp_path / "data", count=24)
    old = {p: "old caption" for p in (images / "10_sks").glob("*.png")}
    for image, text in old.items():
        image.with_suffix(".txt").write_text(text, encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    job = subprocess.Popen([sys.executable, "-m", "trainers", "caption", "--run-dir", str(tmp_path / "job"),
                            "--images", str(images), "--captioner", "florence2", "--model",
                            str(tiny_models["florence2"]), "--existing", "overwrite", "--max-new-tokens", "64",
                            "--device", "cpu"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    done_list = tmp_path / "job" / "done.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(done_list.read_text().splitlines() if done_list.exists() else []) < 3:
        time.sleep(0.05)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    finished = set(done_list.read_text().splitlines())
    assert 3 <= len(finished) < len(old)
    texts = {str(image): image.with_suffix(".txt").read_text(encoding="utf-8") for image in old}
    assert all(texts[image] != "old caption" and texts[image].endswith("\n") for image in finished)  # whole
    rewritten = [image for image, text in texts.items() if image not in finished and text != "old caption"]
    assert len(rewritten) <= 1  # untouched, but for the one written and not yet listed when the job was killed
    assert all(texts[image].endswith("\n") for image in rewritten)
    assert not [p for p in (images / "10_sks").iterdir() if p.name.startswith(".")]  # no temp file left behind
    resumed = run_job("caption", tmp_path / "resumed", "--images", str(images), "--captioner", "florence2",
                      "--model", str(tiny_models["florence2"]), "--existing", "overwrite", "--max-new-tokens", "4",
                      "--resume", str(tmp_path / "job"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads((tmp_path / "resumed" / "report.json").read_text())
    assert report["skipped_done"] == len(finished) and report["written"] == len(old) - len(finished)


def test_clipseg_masks_are_what_masked_loss_trains_with(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    images = image_folder(tmp_path / "data", count=3, side=64)  # the training resolution: masks are used as they are
    done = run_job("masks", tmp_path / "job", "--images", str(images), "--model", str(tiny_models["clipseg"]),
                   "--prompt", "a red thing|a dog", "--threshold", "0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    masks = tmp_path / "data_masks"
    for image in (images / "10_sks").glob("*.png"):
        mask = Image.open(masks / "10_sks" / image.name)
        assert mask.mode == "L" and mask.size == Image.open(image).size
        assert set(np.unique(np.asarray(mask))) <= {0, 255}
        assert (tmp_path / "job" / "previews" / f"10_sks__{image.stem}.jpg").is_file()
    values = {"train_data_dir": str(images), "resolution": "64", "masked_loss": True,
              "conditioning_data_dir": str(masks)}
    catalog = build_catalog(TrainConfig("lora", values).values)
    assert all(image.mask == masks / "10_sks" / image.path.name for image in catalog.images)
    dataset = CaptionedImages(catalog, lambda caps: [], seed=0)
    for sample, index in enumerate(catalog.samples):
        image, item = catalog.images[index], dataset[(0, sample, 0)]
        ours = np.asarray(Image.open(image.mask), dtype=np.float32) / 255
        assert np.array_equal(item["mask"][0].numpy(), ours)


def test_a_background_remover_runs_its_own_code_only_when_trusted(tmp_path: Path,
                                                                  tiny_models: dict[str, Path]) -> None:
    images = image_folder(tmp_path / "data", count=2)
    args = ["--images", str(images), "--method", "background", "--model", str(tiny_models["background"]),
            "--masks-dir", str(tmp_path / "masks"), "--no-previews"]
    refused = run_job("masks", tmp_path / "refused", *args)
    assert refused.returncode == 2 and "trust_remote_code" in refused.stderr
    assert not (tmp_path / "masks").exists()
    done = run_job("masks", tmp_path / "job", *args, "--trust-remote-code")
    assert done.returncode == 0, done.stderr[-3000:]
    for image in (images / "10_sks").glob("*.png"):
        assert Image.open(tmp_path / "masks" / "10_sks" / image.name).size == Image.open(image).size
    assert not (tmp_path / "job" / "previews").exists()
