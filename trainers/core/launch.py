"""How a run is launched: the `accelerate launch` command and, for DeepSpeed and FSDP, the per-run accelerate config.

Both come from the config's launch group. Used by the GUI (Start, "Show command") and by headless users
(`python -m trainers accelerate-config`); argv lists only. Torch-free.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from trainers.core.errors import EXIT_BAD_INPUT
from trainers.core.fsio import atomic_write_text
from trainers.core.options import TrainConfig
from trainers.core.rundir import ACCELERATE_CONFIG

FSDP_MIN_NUM_PARAMS = 10_000_000  # FSDP wraps (and gathers) submodules of at least this many parameters


def accelerate_command(cfg: TrainConfig, config_path: Path, run_dir: Path, machine_rank: int | None = None,
                       python: str = sys.executable) -> list[str]:
    """argv of `accelerate launch … -m trainers <method> --config … --run-dir …`.

    num_processes in the config counts processes on each machine; accelerate wants the total.
    DeepSpeed and FSDP runs read the accelerate.yaml beside the config (written by `write_accelerate_config`).
    """
    rank = cfg.machine_rank if machine_rank is None else machine_rank
    total = total_processes(cfg)
    cmd = [python, "-m", "trainers.train.launcher"]  # accelerate launch, with the trainer's own exit status
    if needs_config_file(cfg):  # DeepSpeed / FSDP: the run's accelerate.yaml says how (the flags below agree)
        cmd += ["--config_file", str(Path(config_path).parent / ACCELERATE_CONFIG)]
    elif total > 1:
        cmd.append("--multi_gpu")
    threads = cpu_threads(cfg)
    if threads:
        cmd += ["--num_cpu_threads_per_process", str(threads)]
    cmd += ["--num_processes", str(total), "--num_machines", str(cfg.num_machines),
            "--mixed_precision", cfg.mixed_precision, "--dynamo_backend", cfg.dynamo_backend,
            "--main_process_port", str(cfg.main_process_port)]
    if cfg.gpu_ids.strip():
        cmd += ["--gpu_ids", cfg.gpu_ids.replace(" ", "")]
    if cfg.num_machines > 1:
        cmd += ["--machine_rank", str(rank), "--main_process_ip", cfg.main_process_ip]
    return cmd + ["-m", "trainers", cfg.method, "--config", str(config_path), "--run-dir", str(run_dir)]


def cpu_threads(cfg: TrainConfig) -> int | None:
    """Threads per process: the option, else on a machine without GPUs the cores shared among this machine's
    processes (accelerate's default for a single process is one thread), else accelerate's default."""
    given = cfg.values.get("num_cpu_threads_per_process")
    if given:
        return int(given)
    if shutil.which("nvidia-smi") is not None:
        return None
    return max(1, (os.cpu_count() or 1) // max(1, cfg.num_processes))


def launch_env(cfg: TrainConfig) -> dict[str, str]:
    """Extra environment: without NVIDIA GPUs, several processes (on this or other machines) run on CPUs (gloo)."""
    if total_processes(cfg) > 1 and shutil.which("nvidia-smi") is None:
        return {"ACCELERATE_USE_CPU": "1"}
    return {}


def other_machine_commands(cfg: TrainConfig, config_path: Path, run_dir: Path) -> list[str]:
    """Shell lines to run on machines 1..N-1 (same paths assumed on every machine)."""
    return [shlex.join(accelerate_command(cfg, config_path, run_dir, machine_rank=rank))
            for rank in range(1, cfg.num_machines)]


def total_processes(cfg: TrainConfig) -> int:
    return cfg.num_processes * cfg.num_machines


def needs_config_file(cfg: TrainConfig) -> bool:
    """DeepSpeed and FSDP are configured through an accelerate config file; DDP needs only launch flags."""
    return cfg.distributed_backend != "ddp"


def accelerate_config(cfg: TrainConfig) -> dict[str, Any]:
    """The accelerate config (as `accelerate config` writes it) for this run's launch options."""
    total = total_processes(cfg)
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "MULTI_GPU" if total > 1 else "NO",
        "downcast_bf16": "no",
        "machine_rank": cfg.machine_rank,
        "main_training_function": "main",
        "mixed_precision": cfg.mixed_precision,
        "num_machines": cfg.num_machines,
        "num_processes": total,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": False,
    }
    if cfg.gpu_ids.strip():
        out["gpu_ids"] = cfg.gpu_ids.replace(" ", "")
    if cfg.num_machines > 1:
        out["main_process_ip"] = cfg.main_process_ip
        out["main_process_port"] = cfg.main_process_port
    if cfg.dynamo_backend != "no":
        out["dynamo_config"] = {"dynamo_backend": cfg.dynamo_backend.upper()}
    if cfg.distributed_backend == "deepspeed":
        out["distributed_type"] = "DEEPSPEED"
        out["deepspeed_config"] = {
            "zero_stage": cfg.zero_stage,
            "offload_optimizer_device": "cpu" if cfg.offload_optimizer else "none",
            "offload_param_device": "none",
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "gradient_clipping": float(cfg.max_grad_norm),  # DeepSpeed clips; accelerate's clip_grad_norm_ defers
            "zero3_init_flag": False,
            "zero3_save_16bit_model": cfg.zero_stage == 3,  # saves gather ZeRO-3's weight shards on rank 0
        }
    elif cfg.distributed_backend == "fsdp":
        out["distributed_type"] = "FSDP"
        out["fsdp_config"] = fsdp_config(cfg)
    return out


def fsdp_config(cfg: TrainConfig) -> dict[str, Any]:
    """accelerate's fsdp_config: FSDP2 (torch's fully_shard: per-parameter shards, runs on CPU too) unless
    fsdp_version = 1 asks for the older flat-parameter FSDP."""
    common = {
        "fsdp_version": cfg.fsdp_version,
        "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
        "fsdp_min_num_params": FSDP_MIN_NUM_PARAMS,
        "fsdp_offload_params": False,
        "fsdp_state_dict_type": cfg.fsdp_state_dict_type,  # training states; model saves are always gathered whole
        "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_activation_checkpointing": False,  # gradient_checkpointing is the model's own (diffusers)
    }
    if cfg.fsdp_version == 2:
        return {**common, "fsdp_reshard_after_forward": True}
    return {**common, "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_forward_prefetch": False, "fsdp_sync_module_states": True,
            "fsdp_use_orig_params": True}  # the optimizer and LR groups see the model's own params


def write_accelerate_config(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """Write <run_dir>/accelerate.yaml when the run needs one (DeepSpeed, FSDP); return its path."""
    if not needs_config_file(cfg):
        return None
    path = Path(run_dir) / ACCELERATE_CONFIG
    atomic_write_text(path, accelerate_config_text(cfg))
    return path


def accelerate_config_text(cfg: TrainConfig) -> str:
    import yaml

    header = f"# accelerate config of this run (distributed_backend = {cfg.distributed_backend}); written by Atelier\n"
    return header + yaml.safe_dump(accelerate_config(cfg), sort_keys=True)


def print_accelerate_config(method: str, config: Path | None, overrides: list[str]) -> int:
    """`python -m trainers accelerate-config`: the YAML on stdout; exit 2 with the problems of a bad config."""
    from trainers.core.options import ConfigError, load_config

    try:
        print(accelerate_config_text(load_config(method, config, overrides)), end="")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0



def main_address_check(ip: str, port: int, machine_rank: int, timeout_s: float = 3.0) -> tuple[str | None, str]:
    """(problem or None, what was found) about the main process's address, as seen from this machine.

    Machine 0 binds the port (it must be free; an address that is not this machine's is only noted, since a
    cloud machine's public address is not on its interfaces); the others connect to it: refused means the machine
    answers and nobody listens yet (machine 0 not started), which is fine; no answer at all is a problem.
    """
    import errno
    import socket

    try:
        family, kind, proto, _, where = socket.getaddrinfo(ip, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as err:
        return (f"main_process_ip: {ip!r} does not resolve on this machine ({err}): give the main machine's IP "
                "address, or a name every machine resolves"), ""
    with socket.socket(family, kind, proto) as probe:
        if machine_rank == 0:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(where)
            except OSError as err:
                if err.errno == errno.EADDRINUSE:
                    return (f"main_process_port: port {port} on {ip} is in use (another run, or another program): "
                            "choose another port"), ""
                return None, f"{ip} is not an address of this machine: machine 0 must be the machine at {ip}"
            return None, f"port {port} on {ip} is free (this machine is the main one)"
        probe.settimeout(timeout_s)
        try:
            code = probe.connect_ex(where)
        except OSError as err:
            code = err.errno or errno.EHOSTUNREACH
    if code == 0:
        return None, f"{ip}:{port} answers (machine 0 is running)"
    if code == errno.ECONNREFUSED:
        return None, f"{ip} answers; nothing listens on port {port} yet: start machine 0 first"
    reason = "no answer" if code in (errno.EAGAIN, errno.ETIMEDOUT, errno.EINPROGRESS) else os.strerror(code)
    return (f"main_process_ip: {ip}:{port} cannot be reached from this machine ({reason}): check the address, "
            "that machine 0 is on this network, and its firewall"), ""
