"""A config as the sd-scripts command a kohya user would run (torch-free).

    argv, toml_text, notes = sd_scripts_command(cfg, family=cfg.model_family, config_path="run.toml")

`toml_text` is a flat `--config_file` with every option both trainers understand (read back by our loader, it
gives the same values); `notes` name what is left out or written differently, and why.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import toml_text as toml
from trainers.core.options.groups.network import NETWORK_ARG_OPTIONS
from trainers.adapters.kohya.compat import FAMILY_FLAGS, FAMILY_LORA_MODULE, FAMILY_ONLY, MUSUBI_FAMILIES
from trainers.adapters.kohya.gui_json_flow import UNREAD as UNREAD_BY_FLOW
from trainers.adapters.kohya.keys import SAMPLERS
from trainers.core.options.loading import TrainConfig
from trainers.core.options.training import DECLARATIONS
from trainers.core.registry import FAMILY_NAMES, method_spec
from trainers.models.lumina2.rules import SYSTEM_PROMPT as LUMINA_SYSTEM_PROMPT

FLOW_FAMILIES = tuple(FAMILY_LORA_MODULE)  # sd3, flux, chroma, lumina2, anima
# Options sd-scripts names otherwise for a family (ours -> its), and its keys that make its script train as we do
RENAMED: dict[str, dict[str, str]] = {"lumina2": {"text_encoder": "gemma2"},
                                      "anima": {"text_encoder": "qwen3", "ae": "vae"}}
# Options sd-scripts names otherwise for every family (ours -> its; see docs/kohya.md, "Names that differ")
SD_SCRIPTS_NAMES: dict[str, str] = {"text_encoder_max_tokens": "t5xxl_max_token_length"}
FAMILY_KEYS: dict[str, dict[str, Any]] = {"chroma": {"model_type": "chroma"},
                                          "lumina2": {"system_prompt": LUMINA_SYSTEM_PROMPT}}

# Our options that sd-scripts reads under the same name, with the same meaning.
SAME: frozenset[str] = frozenset({
    "pretrained_model_name_or_path", "v_parameterization", "vae", "clip_skip", "train_data_dir", "reg_data_dir",
    "prior_loss_weight", "dataset_config", "caption_extension", "caption_prefix", "caption_suffix", "shuffle_caption",
    "keep_tokens", "keep_tokens_separator", "caption_dropout_rate", "caption_tag_dropout_rate", "caption_separator",
    "secondary_separator", "enable_wildcard", "token_warmup_min", "token_warmup_step", "weighted_captions",
    "max_token_length", "resolution", "enable_bucket", "min_bucket_reso", "max_bucket_reso", "bucket_reso_steps",
    "bucket_no_upscale", "random_crop", "flip_aug", "color_aug", "cache_latents", "cache_latents_to_disk",
    "vae_batch_size", "cache_text_encoder_outputs", "max_data_loader_n_workers", "persistent_data_loader_workers",
    "network_module", "network_dim", "network_alpha", "network_weights", "dim_from_weights",
    "network_train_unet_only", "network_train_text_encoder_only", "network_dropout", "scale_weight_norms",
    "base_weights", "base_weights_multiplier", "optimizer_type", "optimizer_args", "learning_rate", "lr_scheduler",
    "lr_warmup_steps", "lr_scheduler_num_cycles", "lr_scheduler_power", "lr_decay_steps", "lr_scheduler_min_lr_ratio",
    "lr_scheduler_timescale", "lr_scheduler_args", "lr_scheduler_type", "train_batch_size",
    "gradient_accumulation_steps", "max_train_epochs", "max_train_steps", "max_grad_norm", "seed", "loss_type",
    "huber_schedule", "huber_c", "huber_scale", "min_snr_gamma", "debiased_estimation_loss",
    "scale_v_pred_loss_like_noise_pred", "v_pred_like_loss", "min_timestep", "max_timestep", "noise_offset",
    "adaptive_noise_scale", "noise_offset_random_strength", "multires_noise_iterations", "multires_noise_discount",
    "ip_noise_gamma", "ip_noise_gamma_random_strength", "zero_terminal_snr", "masked_loss", "conditioning_data_dir",
    "alpha_mask", "mixed_precision", "full_bf16", "gradient_checkpointing", "sdpa", "no_half_vae", "sample_prompts",
    "sample_every_n_steps", "sample_every_n_epochs", "sample_at_first", "output_dir", "output_name",
    "save_precision", "save_every_n_epochs", "save_every_n_steps", "training_comment", "save_state",
    "save_state_on_train_end", "save_last_n_epochs", "save_last_n_steps", "save_last_n_epochs_state",
    "save_last_n_steps_state", "logging_dir", "ddp_timeout", "metadata_title", "metadata_author",
    "metadata_description", "metadata_license", "metadata_tags", "dataset_repeats", "in_json",
    # SD3 and FLUX (sd3_/flux_train*.py)
    "clip_l", "clip_g", "t5xxl", "ae", "tokenizer_cache_dir", "cache_text_encoder_outputs_to_disk", "fp8_base",
    "blocks_to_swap", "timestep_sampling", "sigmoid_scale", "discrete_flow_shift", "model_prediction_type",
    "guidance_scale", "weighting_scheme", "logit_mean", "logit_std", "mode_scale", "training_shift",
    "text_encoder_max_tokens", "apply_t5_attn_mask", "apply_lg_attn_mask",
    "text_encoder",  # Lumina 2's Gemma 2 file, Anima's Qwen3 file: written under sd-scripts' names (RENAMED)
    "llm_adapter_path", "t5_tokenizer_path",  # Anima's (anima_train_utils.py)
})
# sd-scripts' network trainers read these; its train_db.py and fine_tune.py do not.
VALIDATION = ("validation_split", "validation_seed", "validate_every_n_steps", "validate_every_n_epochs",
              "max_validation_steps")
# Ours only, with what a kohya user does instead (said when the option is not at its default).
LEFT_OUT: dict[str, str] = {
    "class_prompt": "sd-scripts does not generate class images: generate them first (Atelier does, in reg_data_dir)",
    "num_class_images": "sd-scripts does not generate class images: generate them first (Atelier does)",
    "use_ema": "sd-scripts has no EMA of the trained weights",
    "keep_global_batch": "sd-scripts' train_batch_size is per process",
    "sample_steps": "sd-scripts' default is 30: give --s N in each line of the prompts file",
    "sample_cfg_scale": "sd-scripts' default is 7.5: give --l N in each line of the prompts file",
    "overwrite_output": "sd-scripts overwrites existing files",
    "save_state_every_n_minutes": "sd-scripts saves states only with save_state / save_every_n_*",
    "keep_every_n_saves": "sd-scripts keeps the last N saves only (save_last_n_*)",
    "nan_steps_before_stop": "sd-scripts does not stop on NaN loss",
    "resume": "Atelier's training states are not sd-scripts' (accelerate) states",
    "gpu_ids": "give --gpu_ids to accelerate launch",
    "save_diffusers_lora": "sd-scripts writes kohya files only",
    "main_process_ip": "give --main_process_ip to accelerate launch",
    "machine_rank": "give --machine_rank to accelerate launch",
    "ddp_gradient_precision": "sd-scripts exchanges float32 gradients",
    "base_model_precision": "sd-scripts quantizes the base to fp8 only (fp8_base, exported for 'fp8')",
    "text_encoder_precision": "sd-scripts' fp8_base casts the text encoders too; int8, int4 and nf4 are Atelier's",
    "layer_offload_fraction": "give blocks_to_swap, a count of blocks, instead",
    "metadata_dir": "sd-scripts reads captions and tags from one in_json file (finetune/merge_captions_to_metadata.py)",
    **dict.fromkeys(("token_string", "init_word", "num_vectors_per_token", "embedding_lr"),
                    "sd-scripts' LoRA scripts learn no new word (pivotal tuning): train the word on its own with "
                    "train_textual_inversion.py"),
}
_METADATA_FILTERS = ("metadata_abs_min_score", "metadata_min_score", "metadata_tag_bonus", "metadata_blacklist_tags",
                     "metadata_remove_tags", "metadata_tag_replacements", "metadata_score_tags",
                     "metadata_shuffle_tag_p", "metadata_consider_every_nth", "metadata_tag_separator")
SAMPLERS_BACK: dict[str, str] = {"dpmpp_2m": "dpmsolver++"}
assert all(SAMPLERS.get(v) == k for k, v in SAMPLERS_BACK.items())


def script_for(method: str, family: str | None) -> tuple[str, list[str]]:
    """The sd-scripts script of `method` (its folder's SD_SCRIPTS; SD_SCRIPTS_OPTIONS: its options that script
    reads under their names) for `family` ('auto' or None: not known, SD1.x's
    with a note); a ConfigError where sd-scripts has none."""
    scripts: dict[str, str] = getattr(DECLARATIONS.get(method), "SD_SCRIPTS", {})
    if family in scripts:
        return scripts[family], []
    title = method_spec(method).title
    if family in FAMILY_NAMES and not any(family in getattr(d, "SD_SCRIPTS", {}) for d in DECLARATIONS.values()):
        from trainers.models.rules import rules_of

        other = " musubi-tuner trains them (its own configs; Atelier exports sd-scripts' only)." if (
            family in MUSUBI_FAMILIES) else ""
        raise ConfigError([ConfigIssue("method", f"cannot be exported to sd-scripts: sd-scripts does not train "
                                       f"{rules_of(family).title} models.{other}")])
    if family in FAMILY_NAMES or FAMILY_NAMES[0] not in scripts:
        trains = f"trains {title} for {', '.join(scripts)} only" if scripts else f"has no script that trains {title}"
        raise ConfigError([ConfigIssue("method", f"cannot be exported to sd-scripts: sd-scripts {trains}")])
    fallback = scripts[FAMILY_NAMES[0]]
    return fallback, [f"the model family is not known, so the command runs {fallback} (SD1.x/SD2.x); set "
                      "model_family, or use the SDXL script (sdxl_...) for an SDXL model"]


def sd_scripts_command(cfg: TrainConfig, family: str | None = None, config_path: str = "config.toml",
                       prompts_path: str | None = None) -> tuple[list[str], str, list[str]]:
    """(argv, toml_text, notes): `accelerate launch ... <script> --config_file <config_path>` and its TOML.

    `family` is the model's (None: cfg.model_family). `prompts_path`: where the caller writes
    cfg.sample_prompt_lines as a prompts file (sd-scripts reads prompts from a file only).
    """
    family = family or cfg.model_family
    script, notes = script_for(cfg.method, family)
    values: dict[str, Any] = {}
    defaults = TrainConfig(cfg.method).values

    samples = any(cfg.values.get(n) for n in ("sample_every_n_steps", "sample_every_n_epochs", "sample_at_first"))

    def note_left_out(name: str, why: str) -> None:
        if cfg.values.get(name) != defaults.get(name) or (samples and name in ("sample_steps", "sample_cfg_scale")):
            notes.append(f"{name} = {cfg.values[name]!r} is left out: {why}")

    family_reads = _family_reads(family)
    same = SAME | set(getattr(DECLARATIONS.get(cfg.method), "SD_SCRIPTS_OPTIONS", ()))  # the method's script's own
    for name, value in cfg.values.items():
        if not family_reads(name):
            if value != defaults.get(name):
                notes.append(f"{name} = {value!r} is left out: {script} does not read it")
        elif name in VALIDATION and "network_args" not in cfg.values:
            note_left_out(name, f"{script} computes no validation loss (sd-scripts' LoRA scripts do)")
        elif (name in same or name in VALIDATION) and value is not None and value != "" and value != []:
            values[name] = value
        elif name == "base_model_precision" and value == "fp8":
            pass  # fp8_base, below
        elif name in LEFT_OUT:
            note_left_out(name, LEFT_OUT[name])
        elif name in _METADATA_FILTERS:
            note_left_out(name, LEFT_OUT["metadata_dir"])
    if cfg.values.get("base_model_precision") == "fp8":
        values["fp8_base"] = True  # sd-scripts' name for it
    _network(cfg, values)
    _family(family, script, values, notes)
    _text_encoder(cfg, script, values, notes)
    _noise_and_samples(cfg, values, notes, prompts_path)
    _saving_and_launch(cfg, values, notes)
    argv = _launch(cfg, script, config_path)
    header = f"# sd-scripts --config_file for {script}, exported by Atelier ({cfg.method})\n"
    return argv, header + toml.dumps(dict(sorted(values.items()))), notes


def _family_reads(family: str | None) -> Callable[[str], bool]:
    """Whether the scripts of `family` (None or 'auto': SD1.x's) read an option: the flow families' scripts do not
    read the noise and loss settings of SD models (kohya_json_flow.UNREAD), the others not the flow options."""
    family = family if family in FAMILY_NAMES else FAMILY_NAMES[0]  # SD1.x's, as script_for falls back

    def reads(name: str) -> bool:
        if name in FAMILY_ONLY:
            return family in FAMILY_ONLY[name]
        return not (family in FLOW_FAMILIES and name in UNREAD_BY_FLOW)
    return reads


def _network(cfg: TrainConfig, values: dict[str, Any]) -> None:
    """Our network options are network_args entries in sd-scripts."""
    if "network_args" not in cfg.values:
        return
    args = list(cfg.network_args)
    for name in NETWORK_ARG_OPTIONS:
        value = cfg.values.get(name)
        if value not in (None, ""):
            args.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
    if args:
        values["network_args"] = args
    values["save_model_as"] = "safetensors"


def _family(family: str | None, script: str, values: dict[str, Any], notes: list[str]) -> None:
    """SD2 is told with v2 = true; SDXL, SD3, FLUX and Lumina 2 by their scripts, whose LoRA modules have their own
    names; Chroma by FLUX.1's scripts' model_type, Lumina 2's text encoder file by sd-scripts' name (gemma2) and its
    captions by the system prompt Lumina2Pipeline (and Atelier) reads them after."""
    flag = next((f for f, fam in FAMILY_FLAGS.items() if fam == family and not script.startswith(f"{f}_")), None)
    if flag:
        values[flag] = True
    if family in FAMILY_LORA_MODULE and values.get("network_module") == "networks.lora":
        values["network_module"] = FAMILY_LORA_MODULE[family]
    for ours, theirs in {**SD_SCRIPTS_NAMES, **RENAMED.get(str(family), {})}.items():
        if ours in values:
            values[theirs] = values.pop(ours)
    values.update(FAMILY_KEYS.get(str(family), {}))
    if family == "lumina2" and "gemma2" not in values:
        notes.append(f"{script} reads Lumina 2 from its single files: set pretrained_model_name_or_path to the "
                     "NextDiT file, gemma2 to the Gemma 2 file and ae to FLUX.1's ae (text_encoder and ae here)")


def _text_encoder(cfg: TrainConfig, script: str, values: dict[str, Any], notes: list[str]) -> None:
    if method_spec(cfg.method).trains not in ("network", "full"):  # its script trains at learning_rate alone
        return
    te_lr, unet_lr = cfg.values.get("text_encoder_lr"), cfg.values.get("unet_lr")
    if "network_args" in cfg.values:  # a LoRA script: one rate per text encoder, as a list
        if te_lr is not None:
            values["text_encoder_lr"] = te_lr if isinstance(te_lr, list) else [te_lr]
        if unet_lr is not None:
            values["unet_lr"] = unet_lr
        return
    if unet_lr is not None:  # the full-model scripts train the UNet at learning_rate
        values["learning_rate"] = unet_lr
        if te_lr is None:
            te_lr = cfg.learning_rate
    values.pop("stop_text_encoder_training", None)
    if script == "train_db.py":
        # train_db.py trains the text encoder unless stop_text_encoder_training < 0
        if not cfg.train_text_encoder:
            values["stop_text_encoder_training"] = -1
        elif cfg.values.get("stop_text_encoder_training") is not None:
            values["stop_text_encoder_training"] = cfg.stop_text_encoder_training
        if te_lr is not None and cfg.train_text_encoder:
            values["learning_rate_te"] = te_lr[0] if isinstance(te_lr, list) else te_lr
        return
    values["train_text_encoder"] = cfg.train_text_encoder
    if cfg.values.get("stop_text_encoder_training") is not None:
        notes.append(f"stop_text_encoder_training = {cfg.stop_text_encoder_training} is left out: {script} trains "
                     "the text encoders to the end")
    if te_lr is not None and cfg.train_text_encoder:
        rates = te_lr if isinstance(te_lr, list) else [te_lr]
        if script.startswith("fine_tune"):
            values["learning_rate_te"] = rates[0]
        else:
            values["learning_rate_te1"], values["learning_rate_te2"] = rates[0], rates[-1]


def _noise_and_samples(cfg: TrainConfig, values: dict[str, Any], notes: list[str], prompts_path: str | None) -> None:
    if cfg.values.get("noise_offset_type") != "Multires":  # sd-scripts adds multires noise whenever it is set
        values.pop("multires_noise_iterations", None)
        values.pop("multires_noise_discount", None)
    sampler = cfg.values.get("sample_sampler")
    if sampler:
        values["sample_sampler"] = SAMPLERS_BACK.get(sampler, sampler)
    lines = cfg.values.get("sample_prompt_lines") or []
    if lines and prompts_path and not cfg.values.get("sample_prompts"):
        values["sample_prompts"] = prompts_path
        notes[:] = [n for n in notes if not n.startswith(("sample_steps", "sample_cfg_scale"))]  # in the lines
        notes.append(f"sample_prompt_lines are written to {prompts_path} (sd-scripts reads prompts from a file), "
                     "with sample_steps and sample_cfg_scale as --s and --l where a line gives none")
    elif lines:
        notes.append("sample_prompt_lines are left out: sd-scripts reads prompts from a file (sample_prompts); "
                     "write them to one")


def _saving_and_launch(cfg: TrainConfig, values: dict[str, Any], notes: list[str]) -> None:
    saved_as = cfg.values.get("save_model_as")
    if saved_as is not None:
        values["save_model_as"] = "safetensors" if saved_as == "both" else saved_as
        if saved_as == "both":
            notes.append("save_model_as = 'both' is written as 'safetensors': sd-scripts saves one format")
    backend = cfg.values.get("distributed_backend", "ddp")
    if backend == "deepspeed":
        values["deepspeed"] = True
        values["zero_stage"] = cfg.zero_stage
        if cfg.offload_optimizer:
            values["offload_optimizer_device"] = "cpu"
    elif backend == "fsdp":
        notes.append("distributed_backend = 'fsdp' is left out: sd-scripts runs DDP or DeepSpeed")
    dynamo = cfg.values.get("dynamo_backend", "no")
    if dynamo != "no":
        values["torch_compile"] = True
        values["dynamo_backend"] = dynamo


def _launch(cfg: TrainConfig, script: str, config_path: str) -> list[str]:
    argv = ["accelerate", "launch", "--num_cpu_threads_per_process",
            str(cfg.values.get("num_cpu_threads_per_process") or 2)]
    processes = cfg.values.get("num_processes", 1) * cfg.values.get("num_machines", 1)
    if processes > 1:
        argv += ["--multi_gpu", "--num_processes", str(processes)]
        if cfg.values.get("num_machines", 1) > 1:
            argv += ["--num_machines", str(cfg.num_machines), "--machine_rank", str(cfg.machine_rank),
                     "--main_process_ip", cfg.main_process_ip]
        if cfg.values.get("gpu_ids"):
            argv += ["--gpu_ids", cfg.gpu_ids]
    if cfg.values.get("main_process_port", 29500) != 29500:
        argv += ["--main_process_port", str(cfg.main_process_port)]
    argv += ["--mixed_precision", cfg.mixed_precision, script, "--config_file", config_path]
    return argv


def prompt_file_lines(cfg: TrainConfig) -> list[str]:
    """cfg.sample_prompt_lines as lines of an sd-scripts prompts file: our sample_steps and sample_cfg_scale are
    written into each line that gives none (sd-scripts' own defaults differ)."""
    lines = []
    for line in cfg.values.get("sample_prompt_lines") or []:
        if not line.strip() or line.lstrip().startswith("#"):
            lines.append(line)
            continue
        words = line.split()
        if "--s" not in words:
            line += f" --s {cfg.sample_steps}"
        if "--l" not in words:
            line += f" --l {cfg.sample_cfg_scale:g}"
        lines.append(line)
    return lines
