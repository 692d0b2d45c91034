"""No save replaces a file its run did not write: step and epoch saves (and their states) are refused, as the final
name is, when the file is there already and overwrite_output is off; Validate names the first one before Start.
A resumed run goes on with the saves of the runs it resumes: the files newer than the first of them started
(`run_started`, recorded in every training state).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from trainers.core.fsio import atomic_dir
from trainers.core.options import TrainConfig
from trainers.core.plan import plan_steps
from trainers.core.saves import MANIFEST, Position, manifest_for, planned_saves
from trainers.preflight.report import preflight

from helpers import events, train
from image_files import captioned_images


def test_planned_saves_are_the_loops_own_in_its_order_and_only_after_a_resume() -> None:
    plan = plan_steps(10, 1, 1, 1, max_epochs=3, max_steps=None)  # 10 steps an epoch, 30 in all
    names = [n.filename for n in planned_saves("x", 4, 1, plan, Position())]
    assert names == ["x-step00000004", "x-step00000008", "x-000001", "x-step00000012", "x-step00000016",
                     "x-step00000020", "x-000002", "x-step00000024", "x-step00000028"]  # step 30, epoch 3: final
    resumed = planned_saves("x", 4, 1, plan, Position(step=12, epoch=2, batches=2))
    assert [n.filename for n in resumed] == ["x-step00000016", "x-step00000020", "x-000002", "x-step00000024",
                                             "x-step00000028"]
    assert planned_saves("x", None, None, plan, Position()) == []


@pytest.fixture()
def values(tmp_path: Path) -> dict[str, object]:
    data = captioned_images(tmp_path / "data" / "5_sks shape", "ab")  # 10 samples: 10 steps an epoch at batch 1
    (tmp_path / "out").mkdir()
    return {"pretrained_model_name_or_path": "org/model", "train_data_dir": str(data), "resolution": "64",
            "output_dir": str(tmp_path / "out"), "output_name": "x", "max_train_epochs": 3,
            "save_every_n_steps": 4, "save_every_n_epochs": 1}


def _overwrite_issues(values: dict[str, object]) -> list[str]:
    return [i.message for i in preflight(TrainConfig("lora", values)).errors
            if i.field == "output_name" and "already exists" in i.message]


def test_validate_names_the_first_existing_file_a_step_or_epoch_save_would_replace(values: dict,
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _overwrite_issues(values) == []
    (out / "x-000002.safetensors").write_bytes(b"someone else's")
    (out / "x-step00000012.safetensors").write_bytes(b"someone else's")
    (issue,) = _overwrite_issues(values)
    assert str(out / "x-step00000012.safetensors") in issue and "step 12 save" in issue  # the first the run hits
    assert "overwrite_output = true" in issue and "did not write it" in issue
    assert _overwrite_issues({**values, "overwrite_output": True}) == []
    assert _overwrite_issues({**values, "save_every_n_steps": None}) == [
        f"{out / 'x-000002.safetensors'} already exists, and this run did not write it: its epoch 2 save would "
        "replace it. Choose another output_name or output_dir, move the file away, or set overwrite_output = true"]


def test_a_state_folder_a_planned_save_would_write_is_refused_too(values: dict, tmp_path: Path) -> None:
    (tmp_path / "out" / "x-step00000008-state").mkdir()
    assert _overwrite_issues(values) == []  # no state is saved with the step saves
    (issue,) = _overwrite_issues({**values, "save_state": True})
    assert "x-step00000008-state already exists" in issue


def _state(folder: Path, at: Position, run_started: float | None) -> None:
    with atomic_dir(folder) as tmp:
        (tmp / "weights.bin").write_bytes(b"w")
        manifest = manifest_for("step", at, files={"weights.bin": 1},
                                **({"run_started": run_started} if run_started is not None else {}))
        (tmp / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def test_a_resumed_run_replaces_its_own_chains_saves_but_not_older_files(values: dict, tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.time() - 60
    _state(out / "x-step00000012-state", Position(step=12, epoch=2, batches=2), run_started=started)
    ours, older = out / "x-step00000016.safetensors", out / "x-step00000024.safetensors"
    ours.write_bytes(b"written by the run resumed, after its state")
    older.write_bytes(b"there before that run started")
    os.utime(older, (started - 3600, started - 3600))
    (out / "x-step00000004.safetensors").write_bytes(b"before the resume point: never written again")
    os.utime(out / "x-step00000004.safetensors", (started - 3600, started - 3600))
    (issue,) = _overwrite_issues({**values, "resume": "latest"})
    assert str(older) in issue and "step 24 save" in issue
    older.unlink()
    assert _overwrite_issues({**values, "resume": "latest"}) == []


@pytest.mark.slow
def test_the_trainer_refuses_a_step_save_over_a_foreign_file_and_a_resume_continues_its_own(
        fake_model_dir: Path, tmp_path: Path) -> None:
    data = captioned_images(tmp_path / "data" / "2_sks shape", "ab")
    out = tmp_path / "out"
    common = {"pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data), "resolution": "64",
              "train_batch_size": 1, "max_data_loader_n_workers": 0, "network_dim": 4, "network_alpha": 2,
              "output_dir": str(out), "output_name": "x", "max_train_steps": 3, "save_every_n_steps": 1}
    out.mkdir()
    foreign = out / "x-step00000002.safetensors"
    foreign.write_bytes(b"another run's LoRA")
    assert train("lora", tmp_path / "refused", **common) == 2  # the trainer's own check, as Validate's
    error = [e for e in events(tmp_path / "refused") if e["type"] == "error"][-1]
    assert str(foreign) in error["message"] and foreign.read_bytes() == b"another run's LoRA"
    foreign.unlink()
    assert train("lora", tmp_path / "first", **common, save_state=True) == 0
    (out / "x.safetensors").unlink()  # as if it had been killed before its end
    again = train("lora", tmp_path / "resumed", **common, resume=str(out / "x-step00000001-state"))
    assert again == 0, [e for e in events(tmp_path / "resumed") if e["type"] == "error"]
    assert (out / "x-step00000002.safetensors").stat().st_mtime >= (out / "x-step00000001-state").stat().st_mtime
