"""Starting and stopping trainer processes. No gradio here: the page calls this.

A run is launched as `accelerate launch … -m trainers <method>` in its own process group,
with stdout and stderr of every rank going to <run>/train.log. The run directory holds
everything, so a restarted GUI finds its runs again through status.json.
"""
from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gui.run_files import list_runs
from trainers.caption.options import JOB_METHOD as DATASET_METHOD
from trainers.caption.options import JobConfig
from trainers.caption.options import new_job_dir as new_dataset_job_dir
from trainers.core import lifecycle
from trainers.core.launch import accelerate_command, launch_env, write_accelerate_config
from trainers.core.options import TrainConfig, options_for
from trainers.core.registry import METHOD_NAMES
from trainers.core.rundir import (
    COMMAND,
    CONFIG,
    LOG,
    Request,
    RunState,
    effective_state,
    new_run_dir,
    read_run_config,
    read_status,
    request,
    update_status,
)
from trainers.core.secrets import trainer_environment
from trainers.generate.options import GenerateConfig, new_job_dir
from trainers.generate.saves import is_lora_file
from trainers.tools.options import JOB_METHOD as TOOLS_METHOD
from trainers.tools.options import ToolConfig, gpu_device
from trainers.tools.options import new_job_dir as new_tool_job_dir

REPO = Path(__file__).resolve().parents[1]
SAVE_GRACE_S = 1800.0  # after Stop, a trainer that has begun saving its training state gets this long to finish


class JobError(RuntimeError):
    """A run cannot start; the message says why and what to do."""


def resume_config(run_dir: Path) -> TrainConfig:
    """The config of a stopped or failed run, with `resume` set to the newest training state of its output."""
    from trainers.core.options import ConfigError, load_config
    from trainers.core.saves import latest_state

    state = effective_state(read_status(run_dir))
    if state.active:
        raise JobError(f"Run {run_dir.name} is still {state}; stop it first.")
    if state == RunState.FINISHED:
        raise JobError(f"Run {run_dir.name} finished. To train it further, raise max_train_epochs or max_train_steps "
                       "and set resume to its state (saved with save_state_on_train_end).")
    saved = read_run_config(run_dir)
    if saved is None or saved.get("method") not in METHOD_NAMES:
        raise JobError(f"Run {run_dir.name} has no readable config.toml of a training method to resume from.")
    try:
        cfg = load_config(saved["method"], run_dir / CONFIG)
    except ConfigError as err:
        raise JobError(f"The config of run {run_dir.name} no longer loads:\n{err}") from None
    found = latest_state(cfg.output_dir, cfg.output_name)
    if found is None:
        raise JobError(f"Run {run_dir.name} left no training state of {cfg.output_name!r} in {cfg.output_dir} (Stop, "
                       "save_state and save_state_every_n_minutes save one), so it cannot be resumed.")
    return cfg.replace(resume=str(found.path))


def gpu_set(cfg_or_status: dict) -> set[str]:
    """The GPUs a run uses ("cpu" stands for the whole machine when there are no GPU ids)."""
    ids = [i.strip() for i in str(cfg_or_status.get("gpu_ids", "")).split(",") if i.strip()]
    if ids:
        return set(ids)
    count = int(cfg_or_status.get("num_processes", 1))
    if count == 0:  # a job that holds no device (a light tools job: see tool_is_light)
        return set()
    return {str(i) for i in range(count)} if gpu_count() else {"cpu"}


def devices_text(devices: set[str]) -> str:
    """What a user calls a run's `devices` (from gpu_set): "GPU 0, 1", or "the CPU" on a machine without GPUs."""
    return "the CPU" if "cpu" in devices else f"GPU {', '.join(sorted(devices))}"


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """The CUDA GPUs the trainers will see, asked of nvidia-smi (the GUI never imports torch); 0 without it, or when
    CUDA_VISIBLE_DEVICES hides them all."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-1")):
        return 0
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(line.startswith("GPU ") for line in listed.splitlines())
    return min(count, len(visible.split(","))) if visible else count


class JobManager:
    def __init__(self, runs_dir: Path, python: str = sys.executable) -> None:
        self.runs_dir = runs_dir
        self.python = python
        self._lock = threading.Lock()

    def active_runs(self) -> list[Path]:
        return [r.path for r in list_runs(self.runs_dir) if r.state.active]

    def new_run_dir(self, cfg: TrainConfig) -> Path:
        return new_run_dir(self.runs_dir, f"{cfg.method}-{cfg.output_name}")

    def command(self, cfg: TrainConfig, run_dir: Path) -> list[str]:
        return accelerate_command(cfg, run_dir / CONFIG, run_dir, python=self.python)

    def written_command(self, cfg: TrainConfig) -> tuple[list[str], Path, Path]:
        """(argv, config path, run dir) of the command Start would run, its config (and accelerate.yaml) written
        to runs/.commands/<run id>/ so the command works when pasted into a terminal."""
        run_dir = self.new_run_dir(cfg)
        folder = self.runs_dir / COMMANDS / run_dir.name
        folder.mkdir(parents=True, exist_ok=True)
        cfg.save(folder / CONFIG)
        write_accelerate_config(cfg, folder)
        return accelerate_command(cfg, folder / CONFIG, run_dir, python=self.python), folder / CONFIG, run_dir

    def start(self, cfg: TrainConfig) -> Path:
        """Write the run directory and launch the trainer; refuse when its GPUs are busy."""
        if cfg.method not in METHOD_NAMES:
            raise JobError(f"There is no {cfg.method!r} trainer.")
        for opt in options_for(cfg.method):  # launch flags go into argv, which cannot hold a NUL character
            value = cfg.values[opt.name]
            if opt.group == "launch" and isinstance(value, str) and "\0" in value:
                raise JobError(f"{opt.name} contains a NUL character; remove it (Validate lists every problem).")
        with self._lock:
            self._refuse_busy(gpu_set(cfg.values))
            run_dir = self.new_run_dir(cfg)
            run_dir.mkdir(parents=True)
            cfg.save(run_dir / CONFIG)
            self.launch_in(run_dir, cfg)
        return run_dir

    def launch_in(self, run_dir: Path, cfg: TrainConfig) -> None:
        """Launch the trainer of `cfg` in the existing run folder `run_dir` (its config.toml written)."""
        write_accelerate_config(cfg, run_dir)  # DeepSpeed / FSDP only; the command names it
        proc = self._launch(self.command(cfg, run_dir), run_dir, launch_env(cfg))
        lifecycle.launched(run_dir, proc.pid, method=cfg.method, gpu_ids=cfg.gpu_ids,
                           num_processes=cfg.num_processes, output_dir=cfg.output_dir, output_name=cfg.output_name)
        threading.Thread(target=self._reap, args=(proc, run_dir), daemon=True).start()

    def busy_with(self, wanted: set[str]) -> Path | None:
        """The active run using any of `wanted` (GPU ids, or "cpu" for the machine), if one is."""
        try:
            self._refuse_busy(wanted)
        except JobError:
            return next(r for r in self.active_runs() if wanted & gpu_set(read_status(r)))
        return None

    def _refuse_busy(self, wanted: set[str]) -> None:
        """Two jobs never share a GPU (or, without GPUs, the machine)."""
        for other in self.active_runs():
            shared = wanted & gpu_set(read_status(other))
            if shared:
                shares = "the CPU" if "cpu" in shared else "a GPU"
                raise JobError(f"Run {other.name} is still active on {devices_text(shared)}. Stop it or wait for it "
                               f"to finish: two runs never share {shares}.")

    @staticmethod
    def _launch(argv: list[str], run_dir: Path, extra_env: dict[str, str]) -> subprocess.Popen:
        """Start `argv` in its own process group, output to <run>/train.log, the command in command.txt."""
        (run_dir / COMMAND).write_text(shlex.join(argv) + "\n", encoding="utf-8")
        env = trainer_environment({**os.environ, **extra_env, "PYTHONUNBUFFERED": "1"})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
        with open(run_dir / LOG, "ab") as log:
            try:
                return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            except (OSError, ValueError) as err:
                raise JobError(f"The trainer could not be started: {err}") from None

    def _reap(self, proc: subprocess.Popen, run_dir: Path) -> None:
        """Record how the launcher ended when the trainer could not say so itself."""
        lifecycle.ended_unreported(run_dir, proc.wait())

    def stop(self, run_dir: Path, grace_s: float = 60.0) -> None:
        """Ask the trainer to save and exit; kill its process group if it has not after `grace_s`."""
        status = read_status(run_dir)
        if not effective_state(status).active:
            return
        request(run_dir, Request.STOP)
        lifecycle.stopping(run_dir)
        pgid = status.get("pgid")
        threading.Thread(target=self._kill_later, args=(run_dir, pgid, grace_s), daemon=True).start()

    def pause(self, run_dir: Path) -> bool:
        """Ask a training run to wait after its current step, its model kept loaded; False when it is not running."""
        return self._ask(run_dir, Request.PAUSE, RunState.RUNNING)

    def continue_(self, run_dir: Path) -> bool:
        """Ask a paused training run to go on; False when it is not paused."""
        return self._ask(run_dir, Request.CONTINUE, RunState.PAUSED)

    def _ask(self, run_dir: Path, wanted: Request, when: RunState) -> bool:
        if effective_state(read_status(run_dir)) != when:
            return False
        request(run_dir, wanted)
        return True

    def resume(self, run_dir: Path) -> Path:
        """Start a new run from a stopped or failed run's config, resuming from its newest training state."""
        started = self.start(resume_config(run_dir))
        update_status(started, resumed_from=run_dir.name)
        return started

    def _kill_later(self, run_dir: Path, pgid: int | None, grace_s: float) -> None:
        deadline = time.time() + grace_s
        while time.time() < deadline:
            status = read_status(run_dir)
            if not effective_state(status).active:
                return
            if status.get("stop_acknowledged"):  # the trainer is saving its training state: let it finish
                deadline = max(deadline, float(status["stop_acknowledged"]) + SAVE_GRACE_S)
            time.sleep(0.5)
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, TypeError):
                return
            time.sleep(wait)
        lifecycle.killed(run_dir, f"did not stop within {grace_s:.0f} s; its processes were killed")

    def start_generate(self, cfg: GenerateConfig) -> Path:
        """Launch `python -m trainers generate` for `cfg` in its own process group; its job folder is under runs/.

        Like a training run it is refused while another run uses its GPUs (the CPU, when it runs there).
        """
        ids = generate_gpu_ids(cfg.devices)
        return self._start_job(new_job_dir(self.runs_dir, cfg), cfg, ["generate"], ids, exclusive=True,
                               method=cfg.mode, num_processes=len(ids.split(",")), output_dir=cfg.output_dir)

    def start_tool(self, cfg: ToolConfig) -> Path:
        """Launch `python -m trainers tools <verb>`. A light job (tool_is_light) holds no device and starts beside any
        run; a heavy one holds its device as a generation job does and is refused while a run uses it
        (RunQueue.submit_tool queues it instead)."""
        if tool_is_light(cfg):
            return self._start_job(new_tool_job_dir(self.runs_dir, cfg), cfg, ["tools", cfg.verb], "",
                                   exclusive=False, method=TOOLS_METHOD, verb=cfg.verb, num_processes=0)
        return self._start_job(new_tool_job_dir(self.runs_dir, cfg), cfg, ["tools", cfg.verb], job_device_ids(cfg),
                               exclusive=True, method=TOOLS_METHOD, verb=cfg.verb, num_processes=1)

    def start_dataset_job(self, cfg: JobConfig) -> Path:
        """Launch `python -m trainers caption|masks` on one GPU (the CPU without one), refused while a run uses it
        (RunQueue.submit_dataset_job queues it instead)."""
        return self._start_job(new_dataset_job_dir(self.runs_dir, cfg), cfg, [cfg.verb], job_device_ids(cfg),
                               exclusive=True, method=DATASET_METHOD, verb=cfg.verb, num_processes=1)

    def queue_job(self, cfg: JobConfig | ToolConfig, **status: Any) -> Path:
        """The folder of a caption, mask or heavy tools job written with a 'queued' status (RunQueue starts it with
        launch_queued_job); `status`: more status.json keys, such as its queue_position."""
        is_tool = isinstance(cfg, ToolConfig)
        run_dir = (new_tool_job_dir if is_tool else new_dataset_job_dir)(self.runs_dir, cfg)  # type: ignore[arg-type]
        run_dir.mkdir(parents=True)
        cfg.save(run_dir / CONFIG)
        update_status(run_dir, state=RunState.QUEUED, method=TOOLS_METHOD if is_tool else DATASET_METHOD,
                      verb=cfg.verb, created=time.time(), gpu_ids=job_device_ids(cfg), num_processes=1, **status)
        return run_dir

    def launch_queued_job(self, run_dir: Path) -> None:
        """Launch the queued caption, mask or tools job in `run_dir` from its config.toml (ConfigError when it no
        longer loads)."""
        from trainers.caption.options import load_job_config
        from trainers.tools.options import load_tool_config

        status = read_status(run_dir)
        method, verb = status.get("method"), str(status.get("verb", ""))
        cfg = (load_tool_config if method == TOOLS_METHOD else load_job_config)(verb, run_dir / CONFIG)
        command = ["tools", verb] if method == TOOLS_METHOD else [verb]
        with self._lock:
            self._launch_job(run_dir, command, job_device_ids(cfg), method=method, verb=verb, num_processes=1)

    def _start_job(self, run_dir: Path, cfg: GenerateConfig | ToolConfig | JobConfig, command: list[str], ids: str,
                   exclusive: bool, **status: Any) -> Path:
        """Write the job's folder and config, launch `python -m trainers <command>` on it, record it in status.json."""
        with self._lock:
            if exclusive:
                self._refuse_busy(set(ids.split(",")))
            run_dir.mkdir(parents=True)
            cfg.save(run_dir / CONFIG)
            self._launch_job(run_dir, command, ids, **status)
        return run_dir

    def _launch_job(self, run_dir: Path, command: list[str], ids: str, **status: Any) -> None:
        """Launch `python -m trainers <command>` on the config.toml in `run_dir` (call it holding the lock)."""
        argv = [self.python, "-m", "trainers", *command, "--config", str(run_dir / CONFIG), "--run-dir", str(run_dir)]
        proc = self._launch(argv, run_dir, {})
        lifecycle.launched(run_dir, proc.pid, gpu_ids=ids, **status)
        threading.Thread(target=self._reap, args=(proc, run_dir), daemon=True).start()


COMMANDS = ".commands"  # configs written for "Show command" (hidden: not runs)


def tool_is_light(cfg: ToolConfig) -> bool:
    """A tools job that reads LoRA files (or a model's configs) and computes for seconds: inspect, resize, LoRAs merged
    into one LoRA, a LoRA converted. It runs beside a training run, also on a CPU-only machine (where it shares the
    cores for those seconds). Merging into a model, extract and converting a model load whole models, taking the
    memory and cores a run needs: they wait in the run queue for their device."""
    if cfg.verb in ("inspect", "resize"):
        return True
    if cfg.verb == "merge":
        return not str(cfg.values.get("model", "")).strip()
    if cfg.verb == "convert":
        source = Path(str(cfg.values.get("input", ""))).expanduser()
        return source.is_file() and is_lora_file(source)
    return False


def job_device_ids(cfg: ToolConfig | JobConfig) -> str:
    """The device a tool, caption or mask job computes on, as status.json records it: its `device`, else GPU 0
    ("cpu" without GPUs)."""
    device = gpu_device(cfg)  # type: ignore[arg-type] - reads the `device` option, as a tool's
    return device if device is not None else ("0" if gpu_count() else "cpu")


def generate_gpu_ids(devices: str) -> str:
    """The GPU ids a generation job uses, as status.json records them ("cpu" when it runs on the CPU)."""
    wanted = devices.strip().lower()
    if wanted == "auto":
        return ",".join(str(i) for i in range(gpu_count())) or "cpu"
    return wanted.replace(" ", "")
