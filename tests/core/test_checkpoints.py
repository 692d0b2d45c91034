"""Saves that survive faults, without a model: atomic state folders under SIGKILL, finding 'latest',
retention, the free-disk check, stale temp files and the `resume` field's validation."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainers.core.errors import DiskFull
from trainers.core.fsio import atomic_dir, clean_stale_temps
from trainers.core.retention import Retention, SavedItem, intermediate_saves, prune, to_remove
from trainers.core.saves import (
    Position,
    check_free_space,
    find_states,
    latest_state,
    resolve_resume,
)

from helpers import write_state

REPO = Path(__file__).resolve().parents[2]


def test_atomic_dir_replaces_whole_folders_or_leaves_the_old_one(tmp_path: Path) -> None:
    final = tmp_path / "x-state"
    write_state(final, 3)
    with pytest.raises(RuntimeError):
        with atomic_dir(final) as tmp:
            (tmp / "half").write_text("half")
            raise RuntimeError("disk error in the middle")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-state"]  # no temp left, old state intact
    assert latest_state(tmp_path, "x").step == 3
    write_state(final, 5)
    assert latest_state(tmp_path, "x").step == 5 and sorted(p.name for p in tmp_path.iterdir()) == ["x-state"]
    assert oct(final.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_latest_skips_incomplete_states_and_resume_names_the_problem(tmp_path: Path) -> None:
    write_state(tmp_path / "run-step00000002-state", 2)
    broken = write_state(tmp_path / "run-step00000009-state", 9)
    (broken / "weights.bin").write_bytes(b"short")  # truncated after the fact
    write_state(tmp_path / "other-step00000020-state", 20)  # another output_name
    (tmp_path / ".run-step00000010-state.tmp-999999").mkdir()  # a save in progress (or killed)
    assert [s.step for s in find_states(tmp_path, "run")] == [2]
    write_state(tmp_path / "run-step00000001-state", 1)  # resumed from an older state: this is the newest now
    assert latest_state(tmp_path, "run").step == 1
    (tmp_path / "run-step00000001-state" / "manifest.json").unlink()
    assert resolve_resume("latest", str(tmp_path), "run") == tmp_path / "run-step00000002-state"
    with pytest.raises(ValueError, match="incomplete: weights.bin"):
        resolve_resume(str(broken), str(tmp_path), "run")
    with pytest.raises(ValueError, match="folder not found"):
        resolve_resume(str(tmp_path / "nope"), str(tmp_path), "run")
    with pytest.raises(ValueError, match="'latest' found no training state of 'new'"):
        resolve_resume("latest", str(tmp_path), "new")
    with pytest.raises(ValueError, match="not a training state"):
        resolve_resume(str(tmp_path), str(tmp_path), "run")


def test_resume_field_is_validated_before_training(tmp_path: Path) -> None:
    from trainers.core.options import load_config
    from trainers.preflight.validate import validate

    cfg = load_config("lora", overrides=[f"output_dir={json.dumps(str(tmp_path))}", "max_train_steps=1",
                                         f"resume={json.dumps(str(tmp_path / 'gone-state'))}"])
    issues = [i for i in validate(cfg) if i.field == "resume"]
    assert len(issues) == 1 and "folder not found" in issues[0].message and issues[0].group == "saving"
    latest = [i for i in validate(cfg.replace(resume="latest")) if i.field == "resume"]
    assert "found no training state of 'lora'" in latest[0].message
    write_state(tmp_path / "lora-step00000004-state", 4)
    assert not [i for i in validate(cfg.replace(resume="latest")) if i.field == "resume"]


def test_free_disk_check_names_output_dir_and_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import trainers.core.saves as ck

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda p: usage._replace(free=40 << 20))
    with pytest.raises(DiskFull) as err:
        check_free_space(tmp_path / "not yet made", 100 << 20, "lora.safetensors")
    text = str(err.value)
    assert f"output_dir ({tmp_path / 'not yet made'})" in text and "lora.safetensors" in text
    assert "121.0 MB" in text and "40.0 MB is free" in text
    check_free_space(tmp_path, 10 << 20, "small")  # fits: no error


def _saves(tmp_path: Path) -> None:
    for step in range(100, 1100, 100):
        (tmp_path / f"m-step{step:08d}.safetensors").write_bytes(b"x")
        write_state(tmp_path / f"m-step{step:08d}-state", step)
        if step == 900:
            write_state(tmp_path / "m-step00000950-state", 950, kind="rolling")
    (tmp_path / "m-step00001200.safetensors").write_bytes(b"x")  # saved before a resume from an older state
    for epoch in range(1, 7):
        (tmp_path / f"m-{epoch:06d}.safetensors").write_bytes(b"x")
        (tmp_path / f"m-{epoch:06d}-ema.safetensors").write_bytes(b"x")
    write_state(tmp_path / "m-state", 1000, kind="final")
    (tmp_path / "m.safetensors").write_bytes(b"x")


def test_retention_keeps_the_last_saves_every_nth_and_the_newest_state(tmp_path: Path) -> None:
    _saves(tmp_path)
    policy = Retention.of({"save_last_n_steps": 300, "save_last_n_steps_state": 100, "keep_every_n_saves": 5,
                           "save_every_n_steps": 100, "save_last_n_epochs": 2, "save_every_n_epochs": 1})
    removed = {p.name for p in prune(tmp_path, "m", policy, Position(step=1000, epoch=6))}
    left = {p.name for p in tmp_path.iterdir()}
    files = sorted(int(n[6:14]) for n in left if n.startswith("m-step") and n.endswith(".safetensors"))
    assert files == [500, 700, 800, 900, 1000, 1200]  # last 300 steps, every 5th save, the other timeline
    states = sorted(int(n[6:14]) for n in left if n.startswith("m-step") and n.endswith("-state"))
    assert states == [500, 900, 1000]  # the rolling state at 950 went: step 1000 is newer
    assert {n for n in left if n.startswith("m-0")} == {"m-000005.safetensors", "m-000005-ema.safetensors",
                                                         "m-000006.safetensors", "m-000006-ema.safetensors"}
    assert {"m-state", "m.safetensors"} <= left and "m-step00000950-state" in removed
    assert not [n for n in left if n.startswith(".")], "deleted folders vanish completely"


def test_retention_never_drops_the_newest_state_and_unset_keeps_all(tmp_path: Path) -> None:
    items = [SavedItem(tmp_path / "a", "step", 200, True), SavedItem(tmp_path / "b", "step", 300, False)]
    assert to_remove(items, Retention.of({"save_last_n_steps": 10}), Position(step=1000)) == [items[1]]
    _saves(tmp_path)
    before = intermediate_saves(tmp_path, "m")
    assert [i.path.name for i in to_remove(before, Retention(), Position(step=1000, epoch=6))] == [
        "m-step00000950-state"]  # only the superseded rolling state


def test_stale_temps_of_dead_processes_are_cleaned_and_an_interrupted_replace_is_undone(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / f".m-step00000005-state.tmp-{dead.pid}").mkdir()
        (tmp_path / f".m-step00000006-state.tmp-{alive.pid}").mkdir()
        (tmp_path / ".m.safetensors.abc123.tmp").write_bytes(b"half")
        (tmp_path / ".tmpAb12Cd").write_bytes(b"half")  # safetensors' own temp file
        os.utime(tmp_path / ".tmpAb12Cd", (time.time() - 3600, time.time() - 3600))
        old = write_state(tmp_path / f".m-state.old-{dead.pid}", 7)
        fresh = tmp_path / ".m-000002.safetensors.xyz.tmp"
        fresh.write_bytes(b"being written")
        os.utime(tmp_path / ".m.safetensors.abc123.tmp", (time.time() - 3600, time.time() - 3600))
        removed = {p.name for p in clean_stale_temps(tmp_path, "m")}
        assert removed == {f".m-step00000005-state.tmp-{dead.pid}", ".m.safetensors.abc123.tmp", ".tmpAb12Cd"}
        assert not old.exists() and latest_state(tmp_path, "m").path.name == "m-state"
        assert fresh.exists() and (tmp_path / f".m-step00000006-state.tmp-{alive.pid}").exists()
    finally:
        alive.kill()
        alive.wait()


CHILD = r"""
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from trainers.core.fsio import atomic_dir
from trainers.core.saves import MANIFEST, Position, manifest_for
from trainers.methods.lora.file_format import save_lora_file

out = Path(sys.argv[1])
base = torch.zeros(3_000_000)
for i in range(1, 100000):
    print(f"saving {i}", flush=True)
    save_lora_file(out / "x.safetensors", {"w": base + i}, {"step": str(i)})
    for name in (f"x-step{i:08d}-state", "x-state"):
        with atomic_dir(out / name) as tmp:
            save_file({"w": base + i}, tmp / "weights.safetensors")
            files = {"weights.safetensors": (tmp / "weights.safetensors").stat().st_size}
            (tmp / MANIFEST).write_text(json.dumps(manifest_for("step", Position(step=i), files=files)))
"""


@pytest.mark.slow
def test_sigkill_during_saves_leaves_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(1)
    for trial in range(3):
        out = tmp_path / f"trial{trial}"
        out.mkdir()
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], stdout=subprocess.PIPE, text=True, env=env)
        wanted = f"saving {3 + trial}"
        for line in child.stdout:
            if line.strip() == wanted:
                break
        time.sleep(rng.uniform(0.0, 0.05))
        child.send_signal(signal.SIGKILL)
        child.wait()
        lora = load_file(out / "x.safetensors")["w"]
        assert lora.min() == lora.max() >= 2 + trial  # a whole earlier or current save
        clean_stale_temps(out, "x")  # folders named with the dead pid go at once
        assert not [p for p in out.iterdir() if p.name.startswith(".x") and not p.name.endswith(".tmp")]
        clean_stale_temps(out, "x", now=time.time() + 3600)  # unnamed temp files once they are old
        assert not [p for p in out.iterdir() if p.name.startswith(".")], "temps of the killed process are gone"
        for state in (latest_state(out, "x"), next(s for s in find_states(out, "x") if s.path.name == "x-state")):
            weights = load_file(state.path / "weights.safetensors")["w"]
            assert weights.min() == weights.max() == state.step >= 2 + trial
