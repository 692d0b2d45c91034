"""GUI pieces without a browser: generated forms, presets, checks, commands, run files, app flags."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gradio as gr
import pytest

from gui.allowed_paths import AllowedRoots
from gui.checks import check_form
from gui.forms import ESSENTIALS, build_form, from_widget, option_for, to_widget
from gui.jobs import JobError, JobManager
from gui.presets import PresetError, Presets
from gui.run_files import RunWatcher, list_runs
from trainers.core import events as ev
from trainers.core.events import TextTail as Tail
from trainers.core.launch import accelerate_command, other_machine_commands
from trainers.core.options import TrainConfig, load_config, options_for
from trainers.demo import build_dataset

REPO = Path(__file__).resolve().parents[2]
METHODS = ("lora", "dreambooth", "finetune")


@pytest.mark.parametrize("method", METHODS)
def test_every_option_of_a_method_has_a_widget(method: str) -> None:
    with gr.Blocks():
        form = build_form(method)
    assert set(form.widgets) == {o.name for o in options_for(method)}
    assert list(form.widgets)[:len(ESSENTIALS)] == list(ESSENTIALS)
    if method != "lora":
        assert "network_dim" not in form.widgets
    for name, widget in form.widgets.items():
        assert widget.elem_id == f"opt-{name}"


@pytest.mark.parametrize("method", METHODS)
def test_widget_values_round_trip_to_the_same_config(method: str) -> None:
    cfg = load_config(method, overrides=["max_train_epochs=3", "noise_offset=0", "optimizer_args=['a=1','b=2']",
                                         "seed=0", "output_name='x y'"])
    back = {o.name: from_widget(o, to_widget(o, cfg.values[o.name])) for o in options_for(method)}
    from trainers.core.options import config_from_dict

    assert config_from_dict(method, back).values == cfg.values


def test_unset_numbers_stay_unset_and_bad_numbers_are_named() -> None:
    opt = option_for("lora", "unet_lr")
    assert from_widget(opt, "") is None and from_widget(opt, "1e-4") == 1e-4
    report = check_form("lora", {"unet_lr": "fast", "max_train_epochs": 1})
    assert any(i.field == "unet_lr" and "'fast'" in i.message for i in report.issues)


def test_toml_export_import_round_trip(tmp_path: Path) -> None:
    cfg = load_config("lora", REPO / "presets" / "demo.toml", ["conv_dim=4", "gpu_ids='0'", "training_comment='é \"q\"'"])
    cfg.save(tmp_path / "export.toml")
    assert load_config("lora", tmp_path / "export.toml").values == cfg.values


def test_checks_report_dataset_problem_in_dataset_group_and_steps(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    values = {"pretrained_model_name_or_path": "org/model", "train_data_dir": str(tmp_path / "empty"),
              "output_dir": str(tmp_path / "out"), "max_train_epochs": 2}
    report = check_form("lora", values)
    assert not report.ok and "dataset" in report.by_group()
    assert "train_data_dir" in report.by_group()["dataset"][0]
    data = build_dataset(tmp_path / "data", folder="3_sks shape")
    report = check_form("lora", {**values, "train_data_dir": str(data), "train_batch_size": 2, "num_processes": 2})
    assert report.ok, report.summary()
    # 8 images x 3 repeats = 24 per epoch / (2 x 2 x 1) = 6 steps per epoch, 12 in total
    assert "**6 steps per epoch**" in report.steps and "**12 steps** in total" in report.steps


def test_all_problems_are_grouped_at_once(tmp_path: Path) -> None:
    report = check_form("lora", {"network_dim": 0, "learning_rate": -1, "bogus": 1})
    assert {i.field for i in report.issues} == {"network_dim", "learning_rate", "bogus",  # and what is missing:
                                                "pretrained_model_name_or_path", "train_data_dir", "output_dir",
                                                "max_train_epochs"}
    grouped = report.by_group()
    assert "network" in grouped and "optimizer" in grouped and "essentials" in grouped


def test_accelerate_command_single_multi_gpu_and_machines(tmp_path: Path) -> None:
    cfg = TrainConfig("lora", {"mixed_precision": "bf16"})
    cmd = accelerate_command(cfg, tmp_path / "c d.toml", tmp_path / "run", python="py")
    assert cmd[:3] == ["py", "-m", "trainers.train.launcher"] and "--multi_gpu" not in cmd
    assert cmd[cmd.index("--num_processes") + 1] == "1" and cmd[cmd.index("--mixed_precision") + 1] == "bf16"
    assert cmd[-6:] == ["-m", "trainers", "lora", "--config", str(tmp_path / "c d.toml"), "--run-dir",
                        str(tmp_path / "run")][-6:]
    multi = accelerate_command(cfg.replace(num_processes=2, gpu_ids="0, 1"), tmp_path / "c.toml", tmp_path, python="py")
    assert "--multi_gpu" in multi and multi[multi.index("--gpu_ids") + 1] == "0,1"
    machines = cfg.replace(num_processes=4, num_machines=2, main_process_ip="10.0.0.5")
    full = accelerate_command(machines, tmp_path / "c.toml", tmp_path, python="py")
    assert full[full.index("--num_processes") + 1] == "8" and full[full.index("--machine_rank") + 1] == "0"
    others = other_machine_commands(machines, tmp_path / "c.toml", tmp_path)
    assert len(others) == 1 and "--machine_rank 1" in others[0]


def test_cpu_runs_get_the_machines_cores_not_accelerates_single_thread(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:

    import trainers.core.launch as launch

    monkeypatch.setattr(launch.shutil, "which", lambda name: None)  # no nvidia-smi: a CPU machine
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 8)
    threads = lambda cmd: cmd[cmd.index("--num_cpu_threads_per_process") + 1]  # noqa: E731
    cfg = TrainConfig("lora", {})
    assert threads(accelerate_command(cfg, tmp_path / "c.toml", tmp_path, python="py")) == "8"
    assert threads(accelerate_command(cfg.replace(num_processes=2), tmp_path / "c.toml", tmp_path, python="py")) == "4"
    assert threads(accelerate_command(cfg.replace(num_cpu_threads_per_process=3), tmp_path / "c.toml", tmp_path,
                                      python="py")) == "3"
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert "--num_cpu_threads_per_process" not in accelerate_command(cfg, tmp_path / "c.toml", tmp_path, python="py")


def test_launch_group_consistency_is_validated() -> None:
    report = check_form("lora", {"gpu_ids": "0,1,2", "num_processes": 2, "num_machines": 2})
    fields = {i.field: i.message for i in report.issues}
    assert "set num_processes = 3" in fields["gpu_ids"] and "main_process_ip" in fields


def test_builtin_presets_load_for_their_method(tmp_path: Path) -> None:
    presets = Presets(tmp_path / "user")
    for method in METHODS:
        names = presets.names(method)
        assert names, method
        for name in names:
            values, _ = presets.load(name, method)
            assert values and "pretrained_model_name_or_path" not in values or name.startswith("demo")
    assert {"demo", "sd15_lora_8gb", "sdxl_lora_12gb", "sdxl_lora_24gb", "sdxl_lora_multi_gpu", "flux_dev_lora_16gb",
            "flux_dev_lora_24gb", "sd35_medium_lora"} <= set(presets.names("lora"))
    flux, _ = presets.load("flux_dev_lora_24gb", "lora")
    assert (flux["timestep_sampling"], flux["discrete_flow_shift"], flux["model_prediction_type"]) == (
        "shift", 3.1582, "raw")
    assert "dreambooth_sd15" in presets.names("dreambooth") and "finetune_sdxl" in presets.names("finetune")


def test_user_presets_save_load_delete_and_never_keep_secrets(tmp_path: Path) -> None:
    presets = Presets(tmp_path / "user")
    saved = presets.save("my fav ü", "lora", {"network_dim": 64, "noise_offset": 0.0, "hf_token": "hf_abc",
                                              "unet_lr": None})
    assert saved in presets.names("lora") and saved not in presets.names("finetune")
    assert presets.choices("lora")[0] == ("my fav ü", saved)  # first, under the name the user typed
    assert ("demo (built-in)", "demo") in presets.choices("lora")
    later = Presets(tmp_path / "user")  # a page built later (a reload) lists it too
    assert saved in later.names("lora")
    text = next((tmp_path / "user").glob("*.toml")).read_text(encoding="utf-8")
    assert "hf_abc" not in text and "hf_token" not in text
    values, _ = presets.load(saved, "lora")
    assert values == {"network_dim": 64, "noise_offset": 0.0}  # a preset sets only what it names
    with pytest.raises(PresetError, match="built-in"):
        presets.delete("demo")
    presets.delete(saved)
    assert saved not in presets.names("lora")


def test_preset_versions_migrate_or_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.core.options.migrations as module

    user = tmp_path / "user"
    user.mkdir()
    (user / "old.toml").write_text('method = "lora"\nlearning_rat = 0.5\n', encoding="utf-8")
    monkeypatch.setattr(module, "MIGRATIONS", {**module.MIGRATIONS, 0: lambda flat: {
        ("learning_rate" if k == "learning_rat" else k): v for k, v in flat.items()}})
    values, _ = Presets(user).load("user: old", "lora")
    assert values == {"learning_rate": 0.5}
    (user / "new.toml").write_text('schema_version = 99\nmethod = "lora"\n', encoding="utf-8")
    with pytest.raises(PresetError, match="newer Atelier"):
        Presets(user).load("user: new", "lora")


def test_tail_reads_only_new_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"one\ntw")
    tail = Tail(path)
    assert tail.read_new() == ["one"]
    with open(path, "ab") as fh:
        fh.write("o\nthrée\n".encode())
    assert tail.read_new() == ["two", "thrée"] and tail.read_new() == []


def test_run_watcher_builds_the_panel_view_and_notices_a_dead_process(tmp_path: Path) -> None:
    run = tmp_path / "run1"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": dead.pid, "method": "lora"}))
    writer = ev.EventWriter(run)
    writer.emit(ev.Start(plan={"total_steps": 10}, family="sd1", trainable_params=1))
    writer.emit(ev.Progress(step=1, total_steps=10, epoch=1, total_epochs=1, loss=1.0, loss_smoothed=1.0, lr=1e-4,
                            it_per_s=1.0, images_per_s=1.0))
    writer.emit(ev.Checkpoint(path="/x/a-000001.safetensors", epoch=1, step=1))
    (run / "train.log").write_text("loading\nsteps: 10%\rsteps: 20%\n")
    view = RunWatcher(run).refresh()
    assert view.progress.step == 1 and view.checkpoints == ["/x/a-000001.safetensors"]
    assert view.log_tail == ["loading", "steps: 20%"]
    assert view.state == "failed" and "out of system memory" in view.error.message
    assert [r.state for r in list_runs(tmp_path)] == ["failed"]


@pytest.mark.slow
def test_job_manager_starts_refuses_a_second_run_and_stops(tmp_path: Path, tiny_sd1_dir: Path) -> None:
    data = build_dataset(tmp_path / "data", folder="50_sks shape")
    cfg = load_config("lora", overrides=[f"pretrained_model_name_or_path={json.dumps(str(tiny_sd1_dir))}",
                                         f"train_data_dir={json.dumps(str(data))}",
                                         f"output_dir={json.dumps(str(tmp_path / 'out'))}", "max_train_epochs=5",
                                         "resolution='64'", "max_data_loader_n_workers=0"])
    jobs = JobManager(tmp_path / "runs")
    run_dir = jobs.start(cfg)
    try:
        assert (run_dir / "config.toml").exists()
        assert "trainers.train.launcher" in (run_dir / "command.txt").read_text()
        assert load_config("lora", run_dir / "config.toml").values == cfg.values
        with pytest.raises(JobError, match="still active"):
            jobs.start(cfg)
        with pytest.raises(JobError, match="still active"):
            jobs.start(load_config("dreambooth"))  # another method on the same machine waits as well
        jobs.stop(run_dir, grace_s=120)
        deadline = time.time() + 180
        while time.time() < deadline and list_runs(tmp_path / "runs")[0].state not in ("stopped", "failed"):
            time.sleep(0.5)
        assert list_runs(tmp_path / "runs")[0].state == "stopped"
    finally:
        status = json.loads((run_dir / "status.json").read_text())
        try:
            os.killpg(status["pgid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_app(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "app.py", "--headless", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--listen"], ["--listen", "0.0.0.0"], ["--share"]])
def test_exposed_app_without_login_refuses_to_start(flags: list[str]) -> None:
    result = run_app(*flags)
    assert result.returncode == 2
    assert "--username/--password" in result.stderr and "--no-auth" in result.stderr


@pytest.mark.slow
def test_auth_file_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "users.txt"
    bad.write_text("alice:pw\nbob\n", encoding="utf-8")
    result = run_app("--listen", "--auth-file", str(bad))
    assert result.returncode != 0 and "line 2" in result.stderr


def test_paths_outside_allowed_roots_are_refused(tmp_path: Path) -> None:
    inside = tmp_path / "inside"
    inside.mkdir()
    values = {"pretrained_model_name_or_path": "org/model", "train_data_dir": "/etc", "output_dir": str(inside / "o"),
              "max_train_epochs": 1, "logging_dir": str(inside / "../outside-link/..")}
    report = check_form("lora", values, allowed_roots=AllowedRoots([inside.resolve()], hub_models=True))
    fields = {i.field for i in report.issues if "is outside the folders this GUI may use" in i.message}
    assert fields == {"train_data_dir", "logging_dir"}
    assert not report.dataset and "etc" not in report.dataset  # nothing was read from /etc


def _update_many(run_dir: str, key: str) -> None:
    from trainers.core.rundir import update_status

    for i in range(150):
        update_status(Path(run_dir), **{f"{key}{i}": i})


def test_status_updates_from_gui_and_trainer_at_once_are_all_kept(tmp_path: Path) -> None:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_update_many, args=(str(tmp_path), who)) for who in ("gui", "trainer")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    status = json.loads((tmp_path / "status.json").read_text(encoding="utf-8"))
    assert {k for k in status if k != "updated"} == {f"{who}{i}" for who in ("gui", "trainer") for i in range(150)}


def test_panel_shows_each_process_step_time_of_a_multi_gpu_run(tmp_path: Path) -> None:
    from gui.run_panel import render

    run = tmp_path / "run2"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": os.getpid(), "method": "lora"}))
    base = {"type": "progress", "total_steps": 40, "epoch": 1, "total_epochs": 1, "loss": 1.0, "loss_smoothed": 1.0,
            "lr": 1e-4, "it_per_s": 2.0, "images_per_s": 4.0, "eta_s": 10, "peak_mem_gb": 1.0, "peak_mem_kind": "cuda"}
    events = [{**base, "step": 20, "rank_step_s": [0.41, 0.63]}, {**base, "step": 21}]  # times come every 20 steps
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    stats = render(RunWatcher(run).refresh())[2][1]
    assert "step time per process 0.41 s / 0.63 s" in stats and "4.00 images/s" in stats
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps({**status, "activity": "sampling"}))
    assert render(RunWatcher(run).refresh())[2][1].startswith("**Sampling…**")  # the pause between steps, named


def test_panel_charts_the_validation_loss_beside_the_training_loss(tmp_path: Path) -> None:
    from gui.run_panel import render

    run = tmp_path / "val"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": os.getpid(), "method": "lora"}))
    writer = ev.EventWriter(run)
    for step in (1, 2, 3, 4):
        writer.emit(ev.Progress(step=step, total_steps=10, epoch=1, total_epochs=1, loss=1.0 / step,
                                loss_smoothed=0.5, lr=1e-4, it_per_s=1.0, images_per_s=2.0))
        if step % 2 == 0:
            writer.emit(ev.Validation(step=step, epoch=1, loss=0.2 * step, divergence=0.1, batches=1))
    watcher = RunWatcher(run)
    panel = render(watcher.refresh())
    chart = panel[3][1].value
    rows = [row for row in chart["data"] if row[2] == "validation"]
    assert [(row[0], round(row[1], 6)) for row in rows] == [(2, 0.4), (4, 0.8)]
    assert {row[2] for row in chart["data"]} == {"raw", "smoothed", "validation"}
    assert "validation loss 0.8000" in panel[2][1]
    key = panel[3][0]
    writer.emit(ev.Validation(step=4, epoch=1, loss=0.7, kind="epoch", batches=1))
    assert render(watcher.refresh())[3][0] != key, "a new validation point redraws the chart"


def test_panel_draws_the_whole_runs_learning_rate_and_the_rate_each_step_reported(tmp_path: Path) -> None:
    from gui.run_panel import render
    from trainers.core.plan import StepPlan

    run = tmp_path / "lr"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": os.getpid(), "method": "lora"}))
    load_config("lora", overrides=["learning_rate=0.001", "lr_scheduler='cosine'", "lr_warmup_steps=10",
                                   "text_encoder_lr=0.0002"]).save(run / "config.toml")
    plan = StepPlan(samples_per_epoch=80, per_device_batch=2, num_processes=1, gradient_accumulation_steps=1,
                    global_batch=2, steps_per_epoch=40, epochs=1, total_steps=40)
    writer = ev.EventWriter(run)
    writer.emit(ev.Start(plan=plan.__dict__, family="sd1", trainable_params=1))
    for step in (1, 2, 3):
        writer.emit(ev.Progress(step=step, total_steps=40, epoch=1, total_epochs=1, loss=0.5, loss_smoothed=0.5,
                                lr=1e-4 * step, it_per_s=1.0, images_per_s=2.0))
    chart = render(RunWatcher(run).refresh())[4][1]
    assert chart.visible and chart.x_lim == [0, 40], "the whole run, not only the steps so far"
    rows = chart.value["data"]
    planned = {name: [(s, lr) for s, lr, series in rows if series == name] for name in
               ("planned learning_rate", "planned text_encoder_lr")}
    assert planned["planned learning_rate"][-1][0] == 40, "the schedule reaches the last step"
    assert max(lr for _, lr in planned["planned learning_rate"]) == pytest.approx(0.001)  # warmed up, then cosine
    assert planned["planned learning_rate"][0][1] < 0.001 / 5 and planned["planned learning_rate"][-1][1] < 1e-5
    assert max(lr for _, lr in planned["planned text_encoder_lr"]) == pytest.approx(0.0002)
    reported = [(s, lr) for s, lr, series in rows if series == "reported"]
    assert [s for s, _ in reported] == [1, 2, 3] and [lr for _, lr in reported] == pytest.approx([1e-4, 2e-4, 3e-4])


def test_the_trainers_suggestions_for_a_failure_reach_the_panel(tmp_path: Path) -> None:
    from gui.run_panel import result_text

    run = tmp_path / "oom"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "failed", "exit_code": 1, "method": "lora"}))
    ev.EventWriter(run).emit(ev.Error(message="out of GPU memory at step 3", kind="out_of_memory",
                                      suggestions=["lower train_batch_size (now 4)", "turn on gradient_checkpointing"]))
    text = result_text(RunWatcher(run).refresh())
    assert "out of GPU memory at step 3" in text and "What to change" in text
    assert "lower train_batch_size (now 4)" in text and "turn on gradient_checkpointing" in text
    assert "8-bit optimizer" not in text  # the generic hint gives way to the config's own suggestions


def test_panel_counts_a_generation_jobs_images_not_steps(tmp_path: Path) -> None:
    from gui.run_panel import render

    job = tmp_path / "job"
    job.mkdir()
    (job / "status.json").write_text(json.dumps({"state": "running", "launcher_pid": os.getpid(),
                                                 "method": "generate"}))
    writer = ev.EventWriter(job)
    writer.emit(ev.JobStart(mode="generate", seed=0, total_images=6, items=6, prompts=3, variants=["base"],
                         workers=["cpu"], out_dir=str(job)))
    writer.emit(ev.GenerateProgress(done=2, total=6, images_per_s=0.5))
    bar = render(RunWatcher(job).refresh())[1][1]
    assert "2 / 6 images" in bar and "steps" not in bar


def test_out_of_range_and_mistyped_numbers_are_named_in_the_report() -> None:
    """Numbers are typed as text: the report (not a browser toast) names every bad one with its range."""
    with gr.Blocks():
        form = build_form("lora")
    assert isinstance(form.widgets["learning_rate"], gr.Textbox)
    assert form.widgets["learning_rate"].label == "Learning rate · learning_rate"
    values = {name: from_widget(option_for("lora", name), text) for name, text in (
        ("learning_rate", "-0.001"), ("train_batch_size", "0"), ("network_alpha", "-5"), ("network_dim", "abc"),
        ("max_train_epochs", "1"))}
    report = check_form("lora", values)
    named = {i.field: i.message for i in report.issues}
    assert set(named) >= {"learning_rate", "train_batch_size", "network_alpha", "network_dim"}
    assert "'abc'" in named["network_dim"] and "None" not in named["network_dim"]
    assert ">= 1" in named["train_batch_size"] or "from 1" in named["train_batch_size"]


def test_the_runs_table_says_when_how_long_what_loss_and_what_a_run_continues(tmp_path: Path) -> None:
    from gui.page import RUN_COLUMNS, run_row

    run = tmp_path / "20260101-lora-b"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora", "created": 1000.0,
                                                 "finished": 1000.0 + 3725, "resumed_from": "20260101-lora-a",
                                                 "output": "/x/b.safetensors"}))
    ev.EventWriter(run).emit(ev.Progress(step=4, total_steps=4, epoch=1, total_epochs=1, loss=0.2, loss_smoothed=0.1234,
                                         lr=1e-4, it_per_s=1.0, images_per_s=1.0, eta_s=0, peak_mem_gb=1.0,
                                         peak_mem_kind="host"))
    row = dict(zip(RUN_COLUMNS, run_row(list_runs(tmp_path)[0])))
    assert row["duration"] == "1:02:05" and row["loss"] == "0.1234" and row["output"] == "b.safetensors"
    assert row["note"] == "resumed from 20260101-lora-a" and row["started"].startswith("1970-01-01")
