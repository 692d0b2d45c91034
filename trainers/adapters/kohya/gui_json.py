"""kohya_ss GUI configs (the JSON its Save/Load buttons and presets hold), read as kohya_ss runs them (torch-free).

kohya_ss turns its JSON into an sd-scripts `--config_file`: it renames a few fields (max_resolution ->
resolution, optimizer -> optimizer_type), builds network_module and network_args from LoRA_type, turns its
percent warmup and its epoch field into sd-scripts values, and leaves out every empty, false or zero value.
`convert` does the same, so the result goes through the same sd-scripts reading as a TOML (kohya_reading).
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.adapters.kohya import gui_json_flow as flow
from trainers.adapters.kohya.compat import SDXL_FLAG
from trainers.adapters.kohya.keys import FAMILY_OF_KEY, TRAINED_HERE, blank, ignored_keys_warning
from trainers.core.options.training import BY_NAME


@dataclass
class KohyaJson:
    method: str  # lora, dreambooth, finetune or textual_inversion: the kohya_ss tab the file is for
    options: dict[str, Any]  # the keys kohya_ss would write in its sd-scripts --config_file
    notes: list[str] = field(default_factory=list)
    decided: frozenset[str] = frozenset()  # the options its fields decide, empty ones included (see decided_options)


# Fields kohya_ss passes to sd-scripts under their own name.
SAME_NAME: frozenset[str] = frozenset({
    "adaptive_noise_scale", "async_upload", "block_lr", "bucket_no_upscale", "bucket_reso_steps", "cache_latents",
    "cache_latents_to_disk", "caption_dropout_every_n_epochs", "caption_dropout_rate", "caption_extension",
    "clip_skip", "color_aug", "dataset_config", "dataset_repeats", "debiased_estimation_loss", "dim_from_weights",
    "disable_mmap_load_safetensors", "dynamo_backend", "enable_bucket", "flip_aug", "fp8_base", "full_bf16",
    "full_fp16", "fused_backward_pass", "fused_optimizer_groups", "gpu_ids", "gradient_accumulation_steps",
    "gradient_checkpointing", "highvram", "huber_c", "huber_scale", "huber_schedule", "huggingface_path_in_repo",
    "huggingface_repo_id", "huggingface_repo_type", "huggingface_repo_visibility", "huggingface_token",
    "ip_noise_gamma", "ip_noise_gamma_random_strength", "keep_tokens", "learning_rate", "learning_rate_te",
    "learning_rate_te1", "learning_rate_te2", "log_config", "log_tracker_config", "log_tracker_name", "log_with",
    "logging_dir", "loss_type", "lr_scheduler", "lr_scheduler_power", "lr_scheduler_type", "masked_loss",
    "max_bucket_reso", "max_grad_norm", "max_timestep", "max_token_length", "max_train_epochs", "max_train_steps",
    "mem_eff_attn", "metadata_author", "metadata_description", "metadata_license", "metadata_tags", "metadata_title",
    "min_bucket_reso", "min_snr_gamma", "min_timestep", "mixed_precision", "multires_noise_discount",
    "multires_noise_iterations", "network_alpha", "network_dim", "network_dropout", "network_weights",
    "no_token_padding", "noise_offset", "noise_offset_random_strength", "noise_offset_type", "num_machines",
    "num_processes", "output_dir", "output_name", "persistent_data_loader_workers", "pretrained_model_name_or_path",
    "prior_loss_weight", "random_crop", "reg_data_dir", "resume", "resume_from_huggingface", "sample_every_n_epochs",
    "sample_every_n_steps", "sample_sampler", "save_every_n_epochs", "save_every_n_steps", "save_last_n_epochs",
    "save_last_n_epochs_state", "save_last_n_steps", "save_last_n_steps_state", "save_model_as", "save_precision",
    "save_state", "save_state_on_train_end", "save_state_to_huggingface", "scale_v_pred_loss_like_noise_pred",
    "scale_weight_norms", "seed", "shuffle_caption", "skip_cache_check", "stop_text_encoder_training",
    "train_batch_size", "train_data_dir", "train_inpainting", "train_text_encoder", "training_comment", "v2",
    "v_parameterization", "v_pred_like_loss", "vae", "vae_batch_size", "wandb_api_key", "wandb_run_name",
    "weighted_captions", "token_string", "init_word", "num_vectors_per_token",
})
RENAMED: dict[str, str] = {"max_resolution": "resolution", "optimizer": "optimizer_type",
                           "lora_network_weights": "network_weights", "main_process_port": "main_process_port"}
# Fields of the GUI itself, or inputs of what kohya_ss builds (network_args, learning rates, warmup): never passed
# as they are. Those with a reason are said when set.
GUI_ONLY: dict[str, str] = {
    "model_list": "", "save_as_bool": "", "LoRA_type": "", "LyCORIS_preset": "", "factor": "", "use_cp": "",
    "use_tucker": "", "use_scalar": "", "rank_dropout_scale": "", "constrain": "", "rescaled": "", "train_norm": "",
    "decompose_both": "", "train_on_input": "", "bypass_mode": "", "dora_wd": "", "unit": "", "conv_dim": "",
    "conv_alpha": "", "rank_dropout": "", "module_dropout": "", "down_lr_weight": "", "mid_lr_weight": "",
    "up_lr_weight": "", "block_lr_zero_threshold": "", "block_dims": "", "block_alphas": "", "conv_block_dims": "",
    "conv_block_alphas": "", "loraplus_lr_ratio": "", "loraplus_unet_lr_ratio": "",
    "loraplus_text_encoder_lr_ratio": "", "text_encoder_lr": "", "unet_lr": "", "lr_warmup": "",
    "lr_warmup_steps": "", "lr_scheduler_num_cycles": "", "epoch": "", "sample_prompts": "", "xformers": "",
    "optimizer_args": "", "lr_scheduler_args": "", "additional_parameters": "", SDXL_FLAG: "", "sdxl_checkbox": "",
    "sdxl_cache_text_encoder_outputs": "", "sdxl_no_half_vae": "", "max_data_loader_n_workers": "",
    "image_folder": "", "train_dir": "", "template": "", "weights": "",
    "multi_gpu": "several processes are multi-GPU here (num_processes)",
    "extra_accelerate_launch_args": "accelerate arguments are Atelier's launch options (num_processes, gpu_ids, ...)",
    "use_wandb": "Weights & Biases logging is not available; TensorBoard logs go to logging_dir",
    "stop_text_encoder_training_pct": "an old kohya_ss field that kohya_ss no longer reads",
    "conv_dims": "an old kohya_ss field that kohya_ss no longer reads",
    "conv_alphas": "an old kohya_ss field that kohya_ss no longer reads",
    "use_8bit_adam": "an old kohya_ss field that kohya_ss no longer reads (optimizer says which)",
    # The finetune tab's dataset preparation (kohya_ss builds an in_json metadata file from image_folder).
    "caption_metadata_filename": "", "latent_metadata_filename": "", "full_path": "", "create_caption": "",
    "create_buckets": "", "generate_caption_database": "", "generate_image_buckets": "", "use_latent_files": "",
    "batch_size": "",
    # accelerate's own settings; Atelier's launch options are num_processes, gpu_ids, dynamo_backend, ...
    "num_cpu_threads_per_process": "", "dynamo_mode": "", "dynamo_use_dynamic": "", "dynamo_use_fullgraph": "",
    "lowvram": "",
}
# GUI fields that decide options of other names: what kohya_ss builds from them.
DECIDES: dict[str, tuple[str, ...]] = {
    "LoRA_type": ("network_module", "network_args"), "epoch": ("max_train_epochs",), "lr_warmup": ("lr_warmup_steps",),
    "sample_prompts": ("sample_prompt_lines",), "xformers": ("sdpa",), f"{SDXL_FLAG}_no_half_vae": ("no_half_vae",),
    f"{SDXL_FLAG}_cache_text_encoder_outputs": ("cache_text_encoder_outputs",),
    "unet_lr": ("network_train_unet_only", "network_train_text_encoder_only"),
    "image_folder": ("train_data_dir", "in_json", "in_json_from_captions"),
    "template": ("use_object_template", "use_style_template"),
}
# Model-family switches of kohya_ss, and the message when one is on.
_FLOW_JSON = ("kohya_ss's FLUX.1 configs other than a 'Flux1' LoRA are not read here: import "
              "the TOML kohya_ss wrote for the run (sd-scripts' options; SD3 and FLUX.1 files load), or start from the "
              "presets flux_dev_lora_16gb, flux_dev_lora_24gb or sd35_medium_lora")
_OWN_TOML = ("kohya_ss's {0} JSON configs are not read here: import the TOML kohya_ss wrote for the run (sd-scripts' "
             "options: {0} files load), or start from the preset {1}")
OTHER_FAMILY_SWITCHES: dict[str, str] = {
    "flux1_checkbox": _FLOW_JSON, "sd3_checkbox": _FLOW_JSON,
    "hunyuan_image_checkbox": _OWN_TOML.format("HunyuanImage 2.1", "hunyuan_image21_lora_24gb"),
    "anima_checkbox": _OWN_TOML.format("Anima", "anima_lora_16gb"),
    "lumina_checkbox": _OWN_TOML.format("Lumina", "lumina2_lora_16gb"),
}
# GUI fields of those families (every kohya_ss JSON has them; kohya_ss passes them only for that family).
OTHER_FAMILY_PREFIXES = ("flux1_", "flux_", "sd3_", "hunyuan_", "anima_", "lumina_", "t5xxl", "show_timesteps",
                         "train_lora_ggpo", "blocks_to_swap", "cpu_offload_checkpointing")
# The flow-matching fields of its SD3/FLUX tabs (options here too), passed by kohya_ss only for those families.
FLOW_GUI_FIELDS = frozenset({"timestep_sampling", "sigmoid_scale", "discrete_flow_shift", "model_prediction_type",
                             "guidance_scale", "weighting_scheme", "logit_mean", "logit_std", "mode_scale",
                             "training_shift", "apply_t5_attn_mask", "apply_lg_attn_mask", "t5xxl_max_token_length",
                             "ae", "clip_l", "clip_g"})
TEXTUAL_INVERSION = ("token_string", "init_word", "num_vectors_per_token", "template")  # fields of the TI tab only
# Its template choice -> the sd-scripts flag kohya_ss passes for it.
TEMPLATES = {"caption": "", "object template": "use_object_template", "style template": "use_style_template"}
FINETUNE_FIELDS = ("image_folder", "train_dir", "caption_metadata_filename", "latent_metadata_filename",
                   "dataset_repeats", "use_latent_files", "create_caption", "create_buckets")

# LoRA_type -> (network_module, LyCORIS algo or None, network_args fields kohya_ss adds for it).
_LYCORIS_COMMON = ("conv_dim", "conv_alpha", "use_tucker", "rank_dropout", "module_dropout")
LORA_TYPES: dict[str, tuple[str, str | None, tuple[str, ...]]] = {
    "Standard": ("networks.lora", None, ()),
    "Flux1": ("networks.lora", None, ()),  # with the FLUX checkbox; its layer fields: kohya_json_flow.py
    "Kohya LoCon": ("networks.lora", None, ("conv_dim", "conv_alpha")),
    "Kohya DyLoRA": ("networks.dylora", None, ("conv_dim", "conv_alpha", "unit")),
    "LoCon": ("lycoris.kohya", "locon", _LYCORIS_COMMON + ("bypass_mode", "dora_wd", "use_scalar", "train_norm")),
    "LyCORIS/LoCon": ("lycoris.kohya", "locon", _LYCORIS_COMMON + ("bypass_mode", "dora_wd", "use_scalar",
                                                                   "train_norm")),
    "LyCORIS/LoHa": ("lycoris.kohya", "loha", _LYCORIS_COMMON + ("bypass_mode", "dora_wd", "use_scalar",
                                                                 "train_norm")),
    "LyCORIS/LoKr": ("lycoris.kohya", "lokr", _LYCORIS_COMMON + ("bypass_mode", "dora_wd", "factor", "use_cp",
                                                                 "use_scalar", "decompose_both", "train_norm")),
    "LyCORIS/iA3": ("lycoris.kohya", "ia3", ("conv_dim", "conv_alpha")),
    "LyCORIS/DyLoRA": ("lycoris.kohya", "dylora", _LYCORIS_COMMON + ("unit", "train_norm")),
    "LyCORIS/GLoRA": ("lycoris.kohya", "glora", _LYCORIS_COMMON + ("train_norm",)),
    "LyCORIS/Diag-OFT": ("lycoris.kohya", "diag-oft", _LYCORIS_COMMON + ("constrain", "rescaled", "train_norm")),
    "LyCORIS/BOFT": ("lycoris.kohya", "boft", _LYCORIS_COMMON + ("train_norm",)),
    "LyCORIS/Native Fine-Tuning": ("lycoris.kohya", "full", ("rank_dropout", "module_dropout", "train_norm")),
}
REFUSED_LORA_TYPES: dict[str, str] = {
    "Kohya LoHa": "sd-scripts' own LoHa is not available; choose LoRA_type 'LyCORIS/LoHa'",
    "Kohya LoKr": "sd-scripts' own LoKr is not available; choose LoRA_type 'LyCORIS/LoKr'",
    "LoRA-FA": "LoRA-FA is not available; choose LoRA_type 'Standard'",
    "Flux1": "it is the FLUX.1 LoRA: kohya_ss runs it only with flux1_checkbox = true",
    "Flux1 OFT": "sd-scripts' FLUX OFT is not available; choose LoRA_type 'Flux1'",
    "HunyuanImage-2.1": _OWN_TOML.format("HunyuanImage 2.1", "hunyuan_image21_lora_24gb"),
    "Anima": _OWN_TOML.format("Anima", "anima_lora_16gb"),
    "Lumina": _OWN_TOML.format("Lumina", "lumina2_lora_16gb"),
}
# The names LyCORIS reads for kohya_ss's fields where they differ.
_LYCORIS_NAMES = {"unit": "block_size", "constrain": "constraint"}
# Block-wise fields kohya_ss adds for networks.lora and networks.dylora when set.
_KOHYA_BLOCK_FIELDS = ("down_lr_weight", "mid_lr_weight", "up_lr_weight", "block_lr_zero_threshold", "block_dims",
                       "block_alphas", "conv_block_dims", "conv_block_alphas", "rank_dropout", "module_dropout")
_LORAPLUS = ("loraplus_lr_ratio", "loraplus_unet_lr_ratio", "loraplus_text_encoder_lr_ratio")
_NUMERIC_FIELDS = {"epoch", "lr_warmup", "lr_warmup_steps", "lr_scheduler_num_cycles", "text_encoder_lr", "unet_lr",
                   "max_data_loader_n_workers", "conv_dim", "conv_alpha", "rank_dropout", "module_dropout", "factor",
                   "unit", "loraplus_lr_ratio", "loraplus_unet_lr_ratio", "loraplus_text_encoder_lr_ratio",
                   "learning_rate_te", "learning_rate_te1", "learning_rate_te2", "main_process_port"}


def read_json_file(path: Path, issues: list[ConfigIssue]) -> KohyaJson | None:
    """A kohya_ss JSON config as sd-scripts keys; None (with an issue naming `--config`) when it is not one."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        issues.append(ConfigIssue("--config", f"file not found: {path}"))
        return None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        issues.append(ConfigIssue("--config", f"{path} is not valid JSON: {err}"))
        return None
    except (OSError, ValueError) as err:
        issues.append(ConfigIssue("--config", f"{path} cannot be read ({err})"))
        return None
    if not isinstance(raw, dict) or not any(isinstance(k, str) and k in SAME_NAME | set(RENAMED) for k in raw):
        issues.append(ConfigIssue("--config", f"{path} is not a kohya_ss config (a JSON object of its fields, e.g. "
                                  "pretrained_model_name_or_path, learning_rate)"))
        return None
    return convert(raw, issues)


def decided_options(raw: dict[str, Any]) -> frozenset[str]:
    """The options a kohya_ss JSON decides: those its fields name (or are renamed to) and those built from them. An
    empty field decides its option too: kohya_ss passes nothing for it, so sd-scripts' default applies."""
    names = {RENAMED.get(key, key) for key in raw}
    for key in raw:
        names.update(DECIDES.get(key, ()))
    return frozenset(names & set(BY_NAME))


def method_of(raw: dict[str, Any]) -> str:
    """The kohya_ss tab a JSON config is for: its fields differ (LoRA_type, the finetune tab's image_folder, the
    textual inversion tab's token_string)."""
    if any(name in raw for name in TEXTUAL_INVERSION):
        return "textual_inversion"
    if "LoRA_type" in raw or "network_dim" in raw:
        return "lora"
    if any(name in raw for name in FINETUNE_FIELDS):
        return "finetune"
    return "dreambooth"


def number(value: Any) -> Any:
    """A number typed into a kohya_ss text field ('1e-4', '0', '') as a number (None when empty)."""
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            found = float(text)
        except ValueError:
            return value
        return int(found) if found.is_integer() and "." not in text and "e" not in text.lower() else found
    return value


def convert(raw: dict[str, Any], issues: list[ConfigIssue]) -> KohyaJson:
    """What kohya_ss would pass sd-scripts for this JSON (see the module docstring)."""
    return _Converter(raw, issues).run()


class _Converter:
    def __init__(self, raw: dict[str, Any], issues: list[ConfigIssue]) -> None:
        self.raw = {k: (number(v) if k in _NUMERIC_FIELDS or _numeric(k) else v) for k, v in raw.items()}
        self.issues = issues
        self.method = method_of(raw)
        self.out: dict[str, Any] = {}
        self.notes: list[str] = []

    def get(self, name: str, default: Any = None) -> Any:
        value = self.raw.get(name, default)
        return default if value is None else value

    def refuse(self, name: str, message: str) -> None:
        self.issues.append(ConfigIssue(name, message))

    def run(self) -> KohyaJson:
        if not self._families():
            return KohyaJson(self.method, {}, self.notes)
        self._copy()
        self._model_flags()
        self._length_and_schedule()
        self._data()
        if self.method == "lora":
            self._network()
        flow.read_flow(self.raw, self.method, self.get, self.out, self.notes, self.refuse)
        self._extras()
        # kohya_ss leaves every empty, false or zero value out of the file (sd-scripts' default applies)
        out = {k: v for k, v in self.out.items() if not (v is None or v is False or v == "" or (
            isinstance(v, (int, float)) and v == 0))}
        out["max_data_loader_n_workers"] = int(self.get("max_data_loader_n_workers", 0) or 0)
        out.update(self._additional_parameters())
        return KohyaJson(self.method, out, self.notes, decided_options(self.raw))

    def _families(self) -> bool:
        """False (with one issue) when the file trains a model family Atelier does not."""
        if self.method == "textual_inversion" and not self._textual_inversion():
            return False
        for switch, message in OTHER_FAMILY_SWITCHES.items():
            if self.raw.get(switch) is True and not (self.method == "lora" and flow.is_flux_lora(self.raw)
                                                     or flow.is_sd3(self.raw)):
                self.refuse(switch, f"{message}: this kohya_ss config is for that model family ({switch} = true); "
                            f"{TRAINED_HERE}")
                return False
        lora_type = self.raw.get("LoRA_type")
        if self.method == "lora" and lora_type in REFUSED_LORA_TYPES and not flow.is_flux_lora(self.raw):
            self.refuse("LoRA_type", f"{lora_type!r} is refused: {REFUSED_LORA_TYPES[lora_type]}")
            return False
        if self.method == "lora" and lora_type is not None and lora_type not in LORA_TYPES:
            self.refuse("LoRA_type", f"{lora_type!r} is not a LoRA_type known here; known: {', '.join(LORA_TYPES)}")
            return False
        return True

    def _textual_inversion(self) -> bool:
        """The textual inversion tab's template (sd-scripts' use_object_template / use_style_template in place of
        the captions) and weights (an embedding file to start from); False (with an issue) for a template kohya_ss
        does not have."""
        template = self.get("template") or "caption"
        if template not in TEMPLATES:
            self.refuse("template", f"{template!r} is not a template of kohya_ss's textual inversion tab; known: "
                        f"{', '.join(TEMPLATES)}")
            return False
        if TEMPLATES[template]:
            self.out[TEMPLATES[template]] = True
        self.out["weights"] = self.get("weights", "")
        return True

    def _copy(self) -> None:
        for name, value in self.raw.items():
            if name in SAME_NAME:
                self.out[name] = value
            elif name in RENAMED:
                self.out[RENAMED[name]] = value
        if self.method in ("lora", "textual_inversion"):  # these tabs cannot stop the text encoder early
            self.out.pop("stop_text_encoder_training", None)

    def _model_flags(self) -> None:
        sdxl = bool(self.get(SDXL_FLAG) or self.get(f"{SDXL_FLAG}_checkbox"))
        if sdxl:
            self.out[SDXL_FLAG] = True
            self.out["v2"] = False
        self.out["no_half_vae"] = sdxl and bool(self.get(f"{SDXL_FLAG}_no_half_vae"))
        self.out["cache_text_encoder_outputs"] = sdxl and bool(self.get(f"{SDXL_FLAG}_cache_text_encoder_outputs"))
        if self.method == "dreambooth" and sdxl:  # kohya_ss: sdxl_train.py trains the text encoders with a rate
            rates = [number(self.get(n)) for n in ("learning_rate_te1", "learning_rate_te2")]
            self.out["train_text_encoder"] = any(isinstance(r, (int, float)) and r > 0 for r in rates)
        elif self.method == "dreambooth" and not flow.is_sd3(self.raw):  # train_db.py's way; sd3_train.py's: below
            stop = number(self.get("stop_text_encoder_training"))
            if not (isinstance(stop, (int, float)) and stop < 0):
                self.out["train_text_encoder"] = True
                self.notes.append("train_text_encoder = true: kohya_ss runs train_db.py, which trains the text "
                                  "encoder (unless stop_text_encoder_training < 0)")
        if sdxl:
            self.out.pop("learning_rate_te", None)
        else:
            self.out.pop("learning_rate_te1", None)
            self.out.pop("learning_rate_te2", None)
        xformers = self.get("xformers")
        self.out["sdpa"] = xformers == "sdpa"
        self.out["xformers"] = xformers in ("xformers", True)

    def _length_and_schedule(self) -> None:
        epoch = number(self.get("epoch"))
        steps, epochs = number(self.get("max_train_steps")), number(self.get("max_train_epochs"))
        if not steps and not epochs and isinstance(epoch, int) and epoch > 0:
            if blank(self.get("dataset_config")):
                self.out["max_train_epochs"] = epoch
                self.notes.append(f"epoch = {epoch} is read as max_train_epochs = {epoch} (kohya_ss counts its "
                                  "max_train_steps from it and the images)")
            else:
                self.out["epoch"] = epoch  # with a dataset_config kohya_ss leaves the length to sd-scripts
        warmup_pct, warmup_steps = number(self.get("lr_warmup")), number(self.get("lr_warmup_steps"))
        if isinstance(warmup_steps, (int, float)) and warmup_steps > 0:
            self.out["lr_warmup_steps"] = int(warmup_steps)
        elif isinstance(warmup_pct, (int, float)) and warmup_pct:
            self.out["lr_warmup_steps"] = warmup_pct / 100
        cycles = number(self.get("lr_scheduler_num_cycles"))
        if cycles is None and self.method != "finetune" and isinstance(epoch, int):
            cycles = epoch  # kohya_ss's LoRA and Dreambooth tabs: one cycle per epoch when left empty
        self.out["lr_scheduler_num_cycles"] = cycles
        for name in ("optimizer_args", "lr_scheduler_args"):
            value = self.get(name, "")
            entries = value if isinstance(value, list) else str(value).replace('"', "").split()
            self.out[name] = entries or None
        noise_type = self.get("noise_offset_type", "Original")
        if self.method == "lora":  # the LoRA tab passes only the chosen kind of noise
            for name in ("adaptive_noise_scale", "noise_offset", "noise_offset_random_strength"):
                if noise_type != "Original":
                    self.out.pop(name, None)
            for name in ("multires_noise_discount", "multires_noise_iterations"):
                if noise_type != "Multires":
                    self.out.pop(name, None)

    def _data(self) -> None:
        lines = [ln.strip() for ln in str(self.get("sample_prompts", "")).splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("#")]
        if lines:
            self.out["sample_prompt_lines"] = lines
            self.notes.append("sample_prompts (the prompt text kohya_ss writes to <output_dir>/sample/prompt.txt) is "
                              "read as sample_prompt_lines")
        if self.method == "finetune":
            self.out["enable_bucket"] = True  # kohya_ss's finetune tab always buckets
            folder = self.get("image_folder", "")
            if not blank(self.get("dataset_config")):
                self.notes.append("image_folder is not used: dataset_config is given (as in kohya_ss)")
            elif not blank(folder):
                self._finetune_metadata(str(folder))

    def _finetune_metadata(self, folder: str) -> None:
        """kohya_ss passes fine_tune.py the image folder as train_data_dir and, as in_json, the metadata file in
        train_dir (meta_lat.json, or meta_cap.json without latent files). Before each run it writes the folder's
        captions into that file (create_caption, on unless turned off; meta_lat.json gets them with create_buckets):
        so the captions are read from the caption files, with the file's other fields when it is there. With
        create_caption off, the file as an earlier kohya_ss run built it is read, and it must be there."""
        latent = str(self.get("use_latent_files", "Yes")) == "Yes"
        name = self.get("latent_metadata_filename" if latent else "caption_metadata_filename") or \
            ("meta_lat.json" if latent else "meta_cap.json")
        meta = os.path.join(str(self.get("train_dir", "")), str(name))  # as kohya_ss joins them
        there = Path(meta).expanduser().is_file()
        rebuilt = self._switch("create_caption", "generate_caption_database") and (
            not latent or self._switch("create_buckets", "generate_image_buckets"))
        if not rebuilt and not there:
            self.refuse("image_folder", f"kohya_ss's finetune tab reads {folder} through the metadata file {meta} "
                        "(in_json), which it builds from the captions before a run (create_caption), and that file "
                        "is not there: turn create_caption on (the captions are then read from the caption files), "
                        "or put the images and their captions in a <dataset_repeats>_<name> folder and set "
                        "train_data_dir to the folder above it, or list the folder as image_dir in a dataset_config")
            return
        self.out["train_data_dir"] = folder
        if there:
            self.out["in_json"] = meta
        unused = "its latent files are not used: latents are encoded or cached here"
        if rebuilt:
            self.out["in_json_from_captions"] = True
            kept = (f"merged into {meta}'s other fields (in_json)" if there else
                    f"{meta} is not there yet and is not written here")
            self.notes.append(f"image_folder's captions are read from its caption files, as kohya_ss writes them "
                              f"into {name} before each run (merge_captions_to_metadata.py): {kept} "
                              f"(in_json_from_captions = true); {unused}")
        else:
            self.notes.append(f"image_folder is read through {meta} (in_json) as kohya_ss last built it "
                              f"(create_caption is off, so captions changed since then are not in it); {unused}")

    def _switch(self, *names: str) -> bool:
        """A kohya_ss checkbox under its saved or older name; unset: on, as kohya_ss's finetune tab starts."""
        value = next((self.raw[n] for n in names if n in self.raw), True)
        return value is True or str(value).lower() in ("true", "1", "yes")

    def _network(self) -> None:
        module, algo, fields = LORA_TYPES[self.get("LoRA_type", "Standard")]
        self.out["network_module"] = module
        args: list[str] = []
        if algo is not None:  # kohya_ss writes every field of a LyCORIS type, set or not
            preset = self.get("LyCORIS_preset", "full")
            args = [f"preset={preset}"] if preset else []
            args += [f"{_LYCORIS_NAMES.get(name, name)}={_text(self.get(name))}" for name in fields
                     if self.get(name) is not None and self.get(name) != ""]
            args.append(f"algo={algo}")
        else:  # Kohya LoCon always writes its conv_dim and conv_alpha; the rest only when set
            always = fields if module == "networks.lora" else ()
            args = [f"{name}={_text(self.get(name))}" for name in fields + _KOHYA_BLOCK_FIELDS
                    if (name in always and self.get(name) not in (None, "")) or not blank(self.get(name))]
        args += [f"{name}={_text(self.get(name))}" for name in _LORAPLUS if not blank(self.get(name))]
        self.out["network_args"] = args or None
        te_lr, unet_lr = number(self.get("text_encoder_lr", 0)) or 0, number(self.get("unet_lr", 0)) or 0
        self.out["text_encoder_lr"] = [float(te_lr)] * 2 if te_lr else None
        self.out["unet_lr"] = float(unet_lr) if unet_lr else None
        self.out["network_train_unet_only"] = te_lr == 0 and unet_lr != 0
        self.out["network_train_text_encoder_only"] = te_lr != 0 and unet_lr == 0

    def _extras(self) -> None:
        """Every field is known: passed, used above, or said to be ignored; the others are named first of all."""
        unknown = []
        for name, value in self.raw.items():
            if name in SAME_NAME or name in RENAMED or name in FAMILY_OF_KEY or name in FLOW_GUI_FIELDS:
                continue
            if name in flow.KNOWN:
                continue
            if name in OTHER_FAMILY_SWITCHES or name.startswith(OTHER_FAMILY_PREFIXES):
                continue
            if name in GUI_ONLY:
                if GUI_ONLY[name] and not blank(value) and not (name == "multi_gpu" and value is False):
                    self.notes.append(f"{name} (kohya_ss) is ignored: {GUI_ONLY[name]}")
            else:
                unknown.append(name)
        if unknown:
            known = SAME_NAME | set(RENAMED) | set(GUI_ONLY) | flow.KNOWN | FLOW_GUI_FIELDS
            self.notes.insert(0, ignored_keys_warning(unknown, known, "fields that are not kohya_ss fields known here "
                                                      "(another tool's, or a newer kohya_ss's) are"))

    def _additional_parameters(self) -> dict[str, Any]:
        """kohya_ss appends `additional_parameters` to sd-scripts' command line: read them as its arguments."""
        text = self.get("additional_parameters", "")
        if not isinstance(text, str) or not text.strip():
            return {}
        try:
            words = shlex.split(text)
        except ValueError as err:
            self.refuse("additional_parameters", f"cannot be split into arguments ({err})")
            return {}
        found: dict[str, Any] = {}
        key: str | None = None
        for word in words:
            if word.startswith("--"):
                name, sep, value = word[2:].partition("=")
                key = name.replace("-", "_")
                found[key] = number(value) if sep else True
                if sep:
                    key = None
            elif key is not None:
                current = found[key]
                found[key] = [number(word)] if current is True else (
                    current if isinstance(current, list) else [current]) + [number(word)]
            else:
                self.refuse("additional_parameters", f"{word!r} is not an --argument or its value")
        for name, value in found.items():  # one value of a one-value argument is that value
            if isinstance(value, list) and len(value) == 1 and not _takes_list(name):
                found[name] = value[0]
        if found:
            self.notes.append(f"additional_parameters are read as sd-scripts arguments: {', '.join(found)}")
        return found


def _numeric(name: str) -> bool:
    return name in BY_NAME and BY_NAME[name].kind in ("int", "float", "number")


def _takes_list(name: str) -> bool:
    return name in ("network_args", "text_encoder_lr") or (name in BY_NAME and BY_NAME[name].kind == "list")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
