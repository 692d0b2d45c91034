"""Checks of the options themselves, across options and against the disk: every problem at once, each tied to a field.

The checks of the dataset options (trainers/data/checks.py) and of each method (its rules module) are added by
`trainers.preflight.validate`, which is what callers use.
"""
from __future__ import annotations

from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.optimizers import spec_for
from trainers.core.options.loading import TrainConfig
from trainers.core.options.training import options_for
from trainers.core.paths import is_hub_id, name_problem, path_problem
from trainers.core.prompts import prompts_file_missing
from trainers.core.schedules import schedule_kind

LONGEST_SAVE_SUFFIX = "-step00000000-ema-state.safetensors"  # the longest name a save of output_name gets


def parse_resolution(text: str) -> tuple[int, int]:
    """'512' -> (512, 512); '768,512' -> (768, 512) as (width, height)."""
    parts = [p.strip() for p in str(text).replace("x", ",").split(",")]
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"got {text!r}; expected 'N' or 'W,H', e.g. '512' or '768,512'")
    w, h = int(parts[0]), int(parts[1])
    if w < 64 or h < 64 or w % 8 or h % 8:
        raise ValueError(f"got {text!r}; width and height must be multiples of 8, at least 64")
    return w, h


def parse_key_values(entries: list[str]) -> dict[str, object]:
    """['weight_decay=0.01', 'betas=(0.9,0.99)'] -> kwargs; values read as Python literals."""
    import ast

    out: dict[str, object] = {}
    for entry in entries:
        key, sep, raw = entry.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"{entry!r} is not key=value")
        try:
            out[key.strip()] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = raw.strip()
    return out


def option_issues(cfg: TrainConfig, check_paths: bool = True) -> list[ConfigIssue]:
    """Every problem of `cfg`'s options that no dataset or method knowledge is needed for."""
    issues: list[ConfigIssue] = []
    group = {o.name: o.group for o in options_for(cfg.method)}

    def bad(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, group.get(name, "")))

    for opt in options_for(cfg.method):
        if opt.required and not str(cfg.values[opt.name]).strip():
            bad(opt.name, f"is required: {opt.help}")
    if cfg.max_train_epochs is None and cfg.max_train_steps is None:
        bad("max_train_epochs", "set max_train_epochs or max_train_steps: there is no hidden default length")
    try:
        parse_resolution(cfg.resolution)
    except ValueError as err:
        bad("resolution", str(err))
    if cfg.full_bf16 and cfg.mixed_precision != "bf16":
        bad("full_bf16", f"needs mixed_precision = 'bf16' (it is {cfg.mixed_precision!r})")
    warmup = cfg.lr_warmup_steps
    if warmup >= 1 and not float(warmup).is_integer():
        bad("lr_warmup_steps", f"got {warmup}; use a whole number of steps, or a fraction below 1")
    if warmup and schedule_kind(cfg) == "constant":  # schedule-free optimizers only warn (optimizer checks)
        bad("lr_warmup_steps", "the 'constant' scheduler has no warmup; choose 'constant_with_warmup' or set 0")
    try:
        parse_key_values(cfg.optimizer_args)
    except ValueError as err:
        bad("optimizer_args", str(err))
    if not cfg.caption_extension.strip(".").strip():
        bad("caption_extension", "must not be empty, e.g. '.txt'")
    elif any(c in cfg.caption_extension for c in "/\\\0") or len(cfg.caption_extension) > 32:
        bad("caption_extension", f"got {cfg.caption_extension!r}; give the ending of the caption files, e.g. '.txt'")
    name = name_problem(cfg.output_name, LONGEST_SAVE_SUFFIX)
    if name:
        bad("output_name", name)
    issues.extend(_launch_issues(cfg, group))
    issues.extend(compile_issues(cfg))
    issues.extend(distributed_issues(cfg))
    issues.extend(_sample_prompt_issues(cfg))
    issues.extend(_resume_issues(cfg, check_paths))
    if check_paths:
        issues.extend(_path_issues(cfg, group))
    return issues


def compile_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """compile_blocks = 'on' where it cannot run (trainers/train/compile.py)."""
    values = cfg.values
    if values.get("compile_blocks") != "on":
        return []
    found = []
    if str(values.get("dynamo_backend") or "no") != "no":
        found.append(ConfigIssue("compile_blocks", f"and dynamo_backend = {values['dynamo_backend']!r} both compile "
                                 "the denoiser (dynamo_backend the whole model): keep one (compile_blocks = 'off', or "
                                 "dynamo_backend = 'no')", "precision"))
    found += [ConfigIssue("compile_blocks", f"cannot compile blocks whose weights {name} moves between the CPU and the "
                          "GPU while they run: set compile_blocks = 'auto' or 'off'", "precision")
              for name in ("blocks_to_swap", "layer_offload_fraction") if values.get(name)]
    return found


def _launch_issues(cfg: TrainConfig, group: dict[str, str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    ids = [i.strip() for i in cfg.gpu_ids.split(",") if i.strip()]
    if ids and not all(i.isdigit() for i in ids):
        issues.append(ConfigIssue("gpu_ids", f"got {cfg.gpu_ids!r}; list GPU numbers like '0,1'", "launch"))
    elif ids and len(ids) != cfg.num_processes:
        issues.append(ConfigIssue("gpu_ids", f"lists {len(ids)} GPU(s) but num_processes is {cfg.num_processes}: "
                                  f"set num_processes = {len(ids)} or list {cfg.num_processes} GPU(s)", "launch"))
    if cfg.num_machines > 1 and not cfg.main_process_ip.strip():
        issues.append(ConfigIssue("main_process_ip", "is required with several machines: the main machine's "
                                  "address", "launch"))
    if cfg.machine_rank >= cfg.num_machines:
        issues.append(ConfigIssue("machine_rank", f"is {cfg.machine_rank} but there are only {cfg.num_machines} "
                                  "machine(s): ranks go from 0 to num_machines - 1", "launch"))
    return issues


def distributed_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """keep_global_batch against the process count, and DDP / DeepSpeed / FSDP against the rest of the config."""
    import importlib.util

    from trainers.core.plan import BatchSplitError, per_device_batch

    issues: list[ConfigIssue] = []

    def bad(name: str, message: str, where: str = "launch") -> None:
        issues.append(ConfigIssue(name, message, where))

    total = cfg.num_processes * cfg.num_machines
    try:
        per_device_batch(cfg.train_batch_size, total, cfg.keep_global_batch)
    except BatchSplitError as err:
        count = f" ({cfg.num_processes} x {cfg.num_machines} machines)" if cfg.num_machines > 1 else ""
        bad("train_batch_size", str(err).replace("processes:", f"processes{count}:", 1), "optimizer")
    offload = next((name for name in ("layer_offload_fraction", "blocks_to_swap") if cfg.values.get(name)), None)
    if offload and total > 1:
        bad(offload, "keeps blocks' weights in CPU memory, which works in one process only: DDP needs every weight "
            "of each process's model on its GPU (it refuses a model with some in CPU memory), and DeepSpeed and FSDP "
            "place the weights themselves. Set num_processes = 1 (one machine), or leave it unset and share a model "
            "too big for one GPU among several with distributed_backend = 'fsdp'", "precision")
    backend = cfg.distributed_backend
    if backend != "ddp" and cfg.ddp_gradient_precision != "fp32":
        bad("ddp_gradient_precision", f"applies to distributed_backend = 'ddp' only ({backend} sets its own "
            "communication precision): set it to 'fp32' or choose 'ddp'")
    if cfg.offload_optimizer and backend != "deepspeed":
        bad("offload_optimizer", "is a DeepSpeed feature (ZeRO-Offload): set distributed_backend = 'deepspeed' or "
            "turn offload_optimizer off")
    if backend == "ddp":
        return issues
    name = "DeepSpeed" if backend == "deepspeed" else "FSDP"
    spec = spec_for(cfg.optimizer_type)
    if spec is not None and spec.package == "bitsandbytes":
        bad("optimizer_type", f"{cfg.optimizer_type} (bitsandbytes) keeps its own quantized states, which {name} "
            "cannot shard: choose 'AdamW' or 'Adafactor', or distributed_backend = 'ddp'", "optimizer")
    if backend == "deepspeed":
        if importlib.util.find_spec("deepspeed") is None:
            bad("distributed_backend", "DeepSpeed is not installed: pip install deepspeed (in this environment), "
                "or choose 'ddp' or 'fsdp'")
        if cfg.full_bf16:
            bad("full_bf16", "DeepSpeed keeps its own float32 master weights and trains in bf16 with "
                "mixed_precision = 'bf16' already: turn full_bf16 off", "precision")
        if cfg.offload_optimizer and cfg.optimizer_type != "AdamW":
            bad("offload_optimizer", f"steps the optimizer on the CPU with DeepSpeed's CPU Adam, not "
                f"{cfg.optimizer_type}: set optimizer_type = 'AdamW' or turn offload_optimizer off")
    sharded = "FSDP" if backend == "fsdp" else "ZeRO-3" if cfg.zero_stage == 3 else None
    if sharded and (cfg.sample_prompts.strip() or cfg.sample_prompt_lines):
        bad("sample_prompts", f"{sharded} leaves each process only shards of the weights, and samples during "
            "training would need them whole on every process: leave sample_prompts empty and render the saves "
            "afterwards (Generate tab, or python -m trainers compare)", "sampling")
    return issues


def _path_issues(cfg: TrainConfig, group: dict[str, str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for opt in options_for(cfg.method):
        given = cfg.values[opt.name]
        for value in (str(v).strip() for v in (given if opt.kind == "list" else [given or ""])):
            if not opt.path or not value or (opt.name == "sample_prompts" and prompts_file_missing(value)):
                continue  # a missing prompts file: warned when the config is read, and the run goes on without it
            problem = path_problem(value, opt.path)
            if problem:
                issues.append(ConfigIssue(opt.name, problem, opt.group))
            elif opt.name == "pretrained_model_name_or_path":
                issues += _model_path_issues(value)
    return issues


def _model_path_issues(model: str) -> list[ConfigIssue]:
    """A model that is neither on disk nor a hub id (what a local one holds: trainers/models/checks.py)."""
    if Path(model).expanduser().exists() or is_hub_id(model):
        return []
    return [ConfigIssue("pretrained_model_name_or_path", f"{model!r} does not exist; give a diffusers folder or "
                        "a hub id like 'org/model'", "model")]


def existing_outputs(cfg: TrainConfig, outputs: list[Path]) -> list[ConfigIssue]:
    """The final outputs (as the method names them) must not exist yet, unless overwrite_output is set."""
    if not cfg.output_dir.strip() or not cfg.output_name.strip() or cfg.overwrite_output:
        return []
    issues = []
    for final in outputs:
        try:
            if final.exists():
                issues.append(ConfigIssue("output_name", f"{final} already exists; choose another output_name or set "
                                          "overwrite_output = true", "saving"))
        except OSError as err:  # e.g. a name too long for the file system
            issues.append(ConfigIssue("output_name", f"cannot name a file in output_dir ({err.strerror}): choose a "
                                      "shorter output_name", "saving"))
            break
    return issues


def states_supported(values: dict) -> bool:
    """Training states (save_state, resume) are written under DDP, FSDP2 (sharded or gathered whole) and DeepSpeed
    (its own checkpoint), not under FSDP1, whose flat parameters have no names to save them by."""
    return values.get("distributed_backend", "ddp") != "fsdp" or values.get("fsdp_version", 2) == 2


def _resume_issues(cfg: TrainConfig, check_paths: bool) -> list[ConfigIssue]:
    """`resume` names a complete training state (a folder, or 'latest' of output_name in output_dir)."""
    from trainers.core.saves import resolve_resume

    if not cfg.resume.strip():
        return []
    if not states_supported(cfg.values):
        return [ConfigIssue("resume", "training states are not saved or resumed with FSDP1: set fsdp_version = 2 "
                            "(or distributed_backend = 'ddp' or 'deepspeed')", "saving")]
    if not check_paths:
        return []
    if cfg.resume.strip().lower() != "latest":
        problem = path_problem(cfg.resume.strip(), "dir")
        if problem:
            return [ConfigIssue("resume", problem, "saving")]
    elif path_problem(cfg.output_dir.strip(), "out"):
        return []  # reported for output_dir
    try:
        resolve_resume(cfg.resume, cfg.output_dir, cfg.output_name)
    except ValueError as err:
        return [ConfigIssue("resume", str(err), "saving")]
    return []


def _sample_prompt_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    from trainers.core.prompts import parse_prompt_lines, read_prompts

    issues, count = [], 0
    sources = [("sample_prompt_lines", lambda: parse_prompt_lines(cfg.sample_prompt_lines))]
    if cfg.sample_prompts.strip() and path_problem(cfg.sample_prompts, "file") is None:  # else: a path issue
        sources.append(("sample_prompts", lambda: read_prompts(Path(cfg.sample_prompts))))
    for name, parse in sources:
        try:
            count += len(parse())
        except ValueError as err:
            issues.append(ConfigIssue(name, str(err), "sampling"))
    wants_samples = cfg.sample_every_n_steps or cfg.sample_every_n_epochs or cfg.sample_at_first
    if wants_samples and not count and not issues and not cfg.sample_prompts.strip():
        issues.append(ConfigIssue("sample_prompts", "samples are scheduled but there are no prompts: give a "
                                  "prompts file or sample_prompt_lines", "sampling"))
    return issues
