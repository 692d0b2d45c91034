"""Helpers shared by tests in several folders: running trainers (as a process or in this one), reading events."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from trainers.core.fsio import atomic_dir
from trainers.core.saves import MANIFEST, Position, manifest_for

REPO = Path(__file__).resolve().parents[1]  # the repository
FAST = ["resolution=64", "train_batch_size=2", "max_data_loader_n_workers=0", "learning_rate=1e-3",
        "network_dim=4", "network_alpha=2"]


def hook_env(**variables: str) -> dict[str, str]:
    """Environment that loads tests/hooks/sitecustomize.py (test-only fault injection) into every process."""
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "hooks")]), **variables}


def fake_family_env(**variables: str) -> dict[str, str]:
    """hook_env in which the tests' fake model family (tests/fake_family/, conftest's fake_model_dir) is a family."""
    return hook_env(ATELIER_TEST_FAKE_FAMILY="1", **variables)


def free_port() -> int:
    """A port nothing listens on now: each multi-process run gets its own, so no run meets another's leftovers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_processes() -> list[str]:
    """`accelerate launch` of 2 CPU processes (DDP over gloo; ACCELERATE_USE_CPU=1 in the environment)."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(free_port())]


def run_trainer(args: list[str], run_dir: Path, launcher: list[str] | None = None,
                env: dict[str, str] | None = None, method: str = "lora") -> subprocess.CompletedProcess:
    """Run a trainer as a process. Several processes wait at most 2 minutes for each other (ddp_timeout), so a
    deadlock fails with both ranks' tracebacks instead of the 10-minute timeout; a timeout still shows the output."""
    multi = launcher is not None and "--multi_gpu" in launcher and not any("ddp_timeout=" in a for a in args)
    cmd = (launcher or [sys.executable]) + ["-m", "trainers", method, "--run-dir", str(run_dir)] + args
    cmd += ["--set", "ddp_timeout=2"] if multi else []
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **(env or {})}
    try:
        return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as timeout:
        log = run_dir / "events.jsonl"
        tail = log.read_text(encoding="utf-8")[-3000:] if log.exists() else "(no events)"
        raise AssertionError(f"timed out after 600 s: {cmd}\nstderr: {str(timeout.stderr or '')[-4000:]}\n"
                             f"events: {tail}") from None


def sets(**values: object) -> list[str]:
    out = []
    for k, v in values.items():
        out += ["--set", f"{k}={json.dumps(v)}"]
    return out


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()]


def fixed_seed_image(pipe, lora: Path | None = None) -> torch.Tensor:
    if lora is not None:
        pipe.load_lora_weights(str(lora.parent), weight_name=lora.name)
    image = pipe("sks shape, red circle", num_inference_steps=2, height=64, width=64,
                 generator=torch.Generator().manual_seed(0), output_type="pt").images
    return image


def train(method: str, run_dir: Path, *settings: str, **values: object) -> int:
    """Run a trainer in this process, as `python -m trainers <method> --set ...` would: `values` first, then
    `settings` ("key=value", as --set takes them; a later one wins)."""
    from trainers.methods import method_memory_tips
    from trainers.preflight.validate import check, method_outputs
    from trainers.train.run import Checks, run_method

    overrides = [f"{k}={json.dumps(v)}" for k, v in values.items()] + list(settings)
    return run_method(method, None, run_dir, overrides, Checks(check, method_outputs, method_memory_tips))


def resumed_saves(method: str, tmp_path: Path, **values: object) -> tuple[dict[str, torch.Tensor],
                                                                          dict[str, torch.Tensor]]:
    """A 2-step run of `method` straight through and one resumed from its step-1 training state: the tensors of
    each one's `<output_name>.safetensors` (straight, resumed). The resumed run trains step 2 only."""
    from safetensors.torch import load_file

    out = tmp_path / "out"
    common = {**values, "output_dir": str(out), "max_train_steps": 2, "save_precision": "float"}
    assert train(method, tmp_path / "straight", **common, output_name="straight", save_every_n_steps=1,
                 save_state=True) == 0
    assert train(method, tmp_path / "resumed", **common, output_name="resumed",
                 resume=str(out / "straight-step00000001-state")) == 0
    assert [e["step"] for e in events(tmp_path / "resumed") if e["type"] == "progress"] == [2]
    return load_file(str(out / "straight.safetensors")), load_file(str(out / "resumed.safetensors"))


def write_state(folder: Path, step: int, kind: str = "step", epoch: int = 1) -> Path:
    with atomic_dir(folder) as tmp:
        (tmp / "weights.bin").write_bytes(b"w" * step)
        manifest = manifest_for(kind, Position(step, epoch, step), files={"weights.bin": step})
        (tmp / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def stand_in_python(folder: Path, until_released: bool = False) -> Path:
    """An executable standing in for the trainer's python: it writes its argv to <run dir>/argv.json, then exits
    (or, `until_released`, runs until the run folder holds a file named `release`, at most 5 minutes: a test that
    fails before releasing it leaves no process behind)."""
    script = folder / "python stand-in 'é'"
    wait = ("end = time.monotonic() + 300\nwhile not os.path.exists(run_dir + '/release') and time.monotonic() < end:\n"
            "    time.sleep(0.05)\n") if until_released else ""
    script.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n"
                      "run_dir = sys.argv[sys.argv.index('--run-dir') + 1]\n"
                      "open(run_dir + '/argv.tmp', 'w', encoding='utf-8').write(json.dumps(sys.argv[1:]))\n"
                      "os.replace(run_dir + '/argv.tmp', run_dir + '/argv.json')\n" + wait, encoding="utf-8")
    script.chmod(0o755)
    return script


def wait_until(predicate: Callable[[], object], what: str, timeout_s: float = 30) -> None:
    """Poll `predicate` until it is true; fail the test naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out: {what}")
        time.sleep(0.05)


def run_plugin_probe(tmp_path: Path, probe: str, preset: str, text: str) -> dict:
    """Run `probe` (a Python program) in a fresh interpreter that sees tmp_path/src's plug-in package first, with a
    presets folder holding `preset`.toml (`text`) and an empty data folder as its arguments; its last line's JSON."""
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / f"{preset}.toml").write_text(text)
    (tmp_path / "data").mkdir()
    env = {"PYTHONPATH": f"{tmp_path / 'src'}:{REPO}:{REPO / 'tests'}", "HF_HUB_OFFLINE": "1",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", probe, str(presets), str(tmp_path / "data"), str(tmp_path / "out")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_plugin_package(root: Path, name: str, files: dict[str, str]) -> None:
    """A throwaway plug-in package root/plugins_for_test/<name>/ holding `files` (file name -> source, dedented)."""
    import textwrap

    folder = root / "plugins_for_test" / name
    folder.mkdir(parents=True)
    (root / "plugins_for_test" / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    for file, source in files.items():
        (folder / file).write_text(textwrap.dedent(source))
