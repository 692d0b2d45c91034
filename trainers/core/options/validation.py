"""Checks across options and against the disk: every problem at once, each tied to a field."""
from __future__ import annotations

import re
from pathlib import Path

from trainers.core.options.loading import TrainConfig
from trainers.core.options.training import options_for
from trainers.core.options.schema import ConfigError, ConfigIssue

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


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


def output_suffix(cfg: TrainConfig) -> str:
    """".safetensors" for a LoRA or a single-file model, "" for a diffusers folder (reported when both are saved)."""
    return ".safetensors" if cfg.method == "lora" or cfg.save_model_as == "safetensors" else ""


def final_output_file(cfg: TrainConfig) -> Path:
    """The method's final output: a LoRA .safetensors file, or a full model (diffusers folder or single file)."""
    return Path(cfg.output_dir).expanduser() / f"{cfg.output_name}{output_suffix(cfg)}"


def final_outputs(cfg: TrainConfig) -> list[Path]:
    """Every path the final save writes (single file and folder, EMA copies)."""
    out = Path(cfg.output_dir).expanduser()
    if cfg.method == "lora":
        return [final_output_file(cfg)]
    names = [cfg.output_name] + ([f"{cfg.output_name}-ema"] if cfg.use_ema != "off" and cfg.save_ema == "both" else [])
    suffixes = {"diffusers": [""], "safetensors": [".safetensors"], "both": ["", ".safetensors"]}[cfg.save_model_as]
    return [out / f"{n}{s}" for n in names for s in suffixes]


def validate(cfg: TrainConfig, check_paths: bool = True) -> list[ConfigIssue]:
    """Return every problem of `cfg`; an empty list means it can start."""
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
    if warmup and cfg.lr_scheduler == "constant":
        bad("lr_warmup_steps", "the 'constant' scheduler has no warmup; choose 'constant_with_warmup' or set 0")
    try:
        parse_key_values(cfg.optimizer_args)
    except ValueError as err:
        bad("optimizer_args", str(err))
    if not cfg.caption_extension.strip(".").strip():
        bad("caption_extension", "must not be empty, e.g. '.txt'")
    if not cfg.output_name.strip() or any(c in cfg.output_name for c in "/\\\0"):
        bad("output_name", f"got {cfg.output_name!r}; use a plain file name without folders")
    if cfg.method == "lora":
        if cfg.network_train_unet_only and cfg.network_train_text_encoder_only:
            bad("network_train_text_encoder_only", "cannot be combined with network_train_unet_only: nothing "
                "would be trained")
        if cfg.conv_alpha is not None and cfg.conv_dim is None:
            bad("conv_alpha", "is set but conv_dim is not; set conv_dim to train the convolutions")
    if cfg.method == "dreambooth" and cfg.num_class_images:
        if not cfg.class_prompt.strip():
            bad("class_prompt", "is needed to generate class images (num_class_images > 0), e.g. 'a photo of a dog'")
        if not cfg.reg_data_dir.strip():
            bad("reg_data_dir", "is needed for class images: the folder they are read from (and generated into)")
    issues.extend(_launch_issues(cfg, group))
    issues.extend(distributed_issues(cfg))
    issues.extend(_dataset_issues(cfg, group))
    issues.extend(_sample_prompt_issues(cfg))
    issues.extend(_resume_issues(cfg, check_paths))
    if check_paths:
        issues.extend(_path_issues(cfg, group))
    return issues


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
    if cfg.method == "lora":
        bad("distributed_backend", f"{name} shards the weights, gradients or optimizer states of full finetunes; "
            "a LoRA's few weights train fastest with 'ddp' (they fit on every GPU): choose 'ddp'")
    if cfg.optimizer_type.endswith("8bit"):
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
    if backend == "fsdp" and cfg.method != "lora" and cfg.use_ema != "off":
        bad("use_ema", "needs the whole weights on every process, which FSDP shards: set use_ema = 'off', or use "
            "distributed_backend = 'deepspeed' (ZeRO 1/2 keeps whole weights) or 'ddp'", "training")
    return issues


def _dataset_issues(cfg: TrainConfig, group: dict[str, str]) -> list[ConfigIssue]:
    """Dataset options that only make sense together; each message says how to fix it."""
    from trainers.data.metadata_json import parse_replacements, parse_score_tags, parse_tag_bonus

    issues: list[ConfigIssue] = []

    def bad(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, group.get(name, "dataset")))

    if not any(str(cfg.values[n]).strip() for n in ("train_data_dir", "metadata_dir", "dataset_config")):
        bad("train_data_dir", "is required: give a folder of <repeats>_<tokens> subfolders (or set metadata_dir "
            "or dataset_config)")
    if cfg.enable_bucket:
        issues.extend(bucket_issues(cfg.resolution, cfg.min_bucket_reso, cfg.max_bucket_reso, cfg.bucket_reso_steps,
                                    group))
    for name, parse in (("metadata_tag_bonus", parse_tag_bonus), ("metadata_tag_replacements", parse_replacements),
                        ("metadata_score_tags", parse_score_tags)):
        try:
            parse(cfg.values[name])
        except ValueError as err:
            bad(name, str(err))
    caching = cfg.cache_latents or cfg.cache_latents_to_disk
    if caching and cfg.random_crop:
        bad("random_crop", "cannot be combined with cache_latents: a cached latent has one fixed crop; turn off "
            "random_crop or latent caching")
    if cfg.cache_text_encoder_outputs:
        if cfg.method == "lora" and not cfg.network_train_unet_only:
            bad("cache_text_encoder_outputs", "needs frozen text encoders: set network_train_unet_only = true, or "
                "turn caching off")
        if cfg.method != "lora" and cfg.train_text_encoder:
            bad("cache_text_encoder_outputs", "needs frozen text encoders: set train_text_encoder = false, or "
                "turn caching off")
        for name in ("shuffle_caption", "caption_dropout_rate", "caption_tag_dropout_rate", "metadata_shuffle_tag_p"):
            if cfg.values[name]:
                bad(name, "changes captions every epoch, so text-encoder outputs cannot be cached: turn it off or "
                    "set cache_text_encoder_outputs = false")
    return issues


def bucket_issues(resolution: str, min_reso: int, max_reso: int, steps: int,
                  group: dict[str, str] | None = None) -> list[ConfigIssue]:
    """Bucket settings against the resolution (also used for each dataset of a dataset_config)."""
    issues: list[ConfigIssue] = []

    def bad(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, (group or {}).get(name, "dataset")))

    try:
        width, height = parse_resolution(resolution)
    except ValueError:
        return issues  # reported for resolution itself
    for name, value in (("bucket_reso_steps", steps), ("min_bucket_reso", min_reso), ("max_bucket_reso", max_reso)):
        if value % 8:
            bad(name, f"got {value}; use a multiple of 8 (the VAE works in 8-pixel blocks), e.g. {value // 8 * 8 or 8}")
    if min_reso > min(width, height):
        bad("min_bucket_reso", f"is {min_reso}, larger than the resolution's smaller side {min(width, height)}; "
            f"set it to {min(width, height)} or less")
    if max_reso < max(width, height):
        bad("max_bucket_reso", f"is {max_reso}, smaller than the resolution's larger side {max(width, height)}; "
            f"set it to {max(width, height)} or more")
    return issues


def _path_issues(cfg: TrainConfig, group: dict[str, str]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    model = cfg.pretrained_model_name_or_path.strip()
    if model:
        p = Path(model).expanduser()
        if p.is_dir():
            if not (p / "model_index.json").exists() and not (p / "unet").is_dir():
                issues.append(ConfigIssue("pretrained_model_name_or_path", f"{model!r} is a folder but not a "
                              "diffusers model (no model_index.json or unet/ inside)", "model"))
        elif p.is_file():
            if p.suffix.lower() not in (".safetensors", ".ckpt", ".pt", ".pth"):
                issues.append(ConfigIssue("pretrained_model_name_or_path", f"{model!r} is a file but not a "
                              ".safetensors or .ckpt checkpoint; give a diffusers folder, a hub id or a "
                              "single-file checkpoint", "model"))
        elif not HUB_ID.match(model):
            issues.append(ConfigIssue("pretrained_model_name_or_path", f"{model!r} does not exist; give a "
                          "diffusers folder or a hub id like 'org/model'", "model"))
    for opt in options_for(cfg.method):
        value = str(cfg.values[opt.name] or "").strip()
        if opt.path not in ("dir", "file") or not value:
            continue
        p = Path(value).expanduser()
        if not (p.is_dir() if opt.path == "dir" else p.is_file()):
            what = "folder" if opt.path == "dir" else "file"
            issues.append(ConfigIssue(opt.name, f"{what} not found: {value}", opt.group))
    if cfg.output_dir.strip() and cfg.output_name.strip():
        for final in final_outputs(cfg):
            if final.exists() and not cfg.overwrite_output:
                issues.append(ConfigIssue("output_name", f"{final} already exists; choose another output_name or "
                              "set overwrite_output = true", "saving"))
    return issues


def _resume_issues(cfg: TrainConfig, check_paths: bool) -> list[ConfigIssue]:
    """`resume` names a complete training state (a folder, or 'latest' of output_name in output_dir)."""
    from trainers.core.saves import resolve_resume

    if not cfg.resume.strip():
        return []
    backend = cfg.values.get("distributed_backend", "ddp")
    if backend != "ddp":
        return [ConfigIssue("resume", f"training states are saved and resumed with distributed_backend = 'ddp' only "
                            f"(this config has {backend!r})", "saving")]
    if not check_paths:
        return []
    try:
        resolve_resume(cfg.resume, cfg.output_dir, cfg.output_name)
    except ValueError as err:
        return [ConfigIssue("resume", str(err), "saving")]
    return []


def _sample_prompt_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    from trainers.core.prompts import parse_prompt_lines, read_prompts

    issues, count = [], 0
    sources = [("sample_prompt_lines", lambda: parse_prompt_lines(cfg.sample_prompt_lines))]
    if Path(cfg.sample_prompts).expanduser().is_file():  # a missing file is reported with the other paths
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


def check(cfg: TrainConfig, check_paths: bool = True) -> None:
    """Raise ConfigError listing every problem."""
    issues = validate(cfg, check_paths)
    if issues:
        raise ConfigError(issues)
