"""musubi-tuner's options (src/musubi_tuner/training/parser_common.py, qwen_image_train_network.py,
zimage_train_network.py, flux_2_train_network.py, krea2_train_network.py, ideogram4_train_network.py) with musubi's
meaning, as Atelier's
(torch-free).

Options of the same name and meaning pass through; musubi's network module names the family; options that change
what is trained and have no counterpart here are refused by name; speed-only options are left out with a note.
Options a file leaves out take musubi's default where ours would train differently.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.adapters.kohya.keys import blank
from trainers.adapters.musubi import hidream_o1, hunyuan_video15, wan
from trainers.data.video_toml import is_video_dataset_config

# musubi-tuner's network modules of the families trained here -> model_family
FAMILY_MODULES: dict[str, str] = {"networks.lora_qwen_image": "qwen_image", "networks.lora_zimage": "zimage",
                                  "networks.lora_flux_2": "flux2", "networks.lora_krea2": "krea2",
                                  "networks.lora_ideogram4": "ideogram4", "networks.lora_wan": "wan21",
                                  hunyuan_video15.MODULE: hunyuan_video15.FAMILY, hidream_o1.MODULE: hidream_o1.FAMILY}
# Keys only musubi-tuner writes (what tells its files from sd-scripts')
MUSUBI_KEYS = frozenset({"dit", "dit_dtype", "fp8_vl", "fp8_llm", "fp8_scaled", "vae_dtype", "flow_shift",
                         "num_timestep_buckets", "preserve_distribution_shape", "remove_first_image_from_target",
                         "use_32bit_attention", "img_in_txt_in_offloading", "block_swap_h2d_only", "turbo_dit",
                         "dit_high_noise", "timestep_boundary", "offload_inactive_dit", "fp8_t5"})
_MODEL_FILES = ("dit", "text_encoder", "vae")
_FOLDER = ("musubi-tuner's separate model files are not read for this family yet: give its diffusers folder (e.g. "
           "Qwen/Qwen-Image) as pretrained_model_name_or_path")
# musubi-tuner's model files -> our options, for the families that read them (ComfyUI's split files)
_SPLIT_FILES = {"dit": "pretrained_model_name_or_path", "text_encoder": "text_encoder", "vae": "ae"}
FILE_OPTIONS: dict[str, dict[str, str]] = {
    "zimage": _SPLIT_FILES, "qwen_image": _SPLIT_FILES, "ideogram4": _SPLIT_FILES, **wan.FILE_OPTIONS,
    hunyuan_video15.FAMILY: hunyuan_video15.FILE_OPTIONS, hidream_o1.FAMILY: hidream_o1.FILE_OPTIONS}
# Why a family's musubi-tuner model files are refused, where the generic _FOLDER does not say it
FOLDER_ONLY: dict[str, str] = {
    "flux2": ("FLUX.2's single files (BFL's flux2-*.safetensors, its separate text encoder and ae) are not read here "
              "yet: give its diffusers folder as pretrained_model_name_or_path (model_version names the published "
              "one, e.g. black-forest-labs/FLUX.2-klein-4B)"),
    "krea2": ("Krea 2's single files (the reference krea-ai/krea-2 DiT, the Qwen-Image VAE, Qwen3-VL) are not read "
              "here yet: give its diffusers folder (Krea2Pipeline's) as pretrained_model_name_or_path"),
    hidream_o1.FAMILY: hidream_o1.FOLDER_ONLY}
# musubi-tuner's options of one family's script with no effect on what is trained here: left out, said once
# (Ideogram 4's samples render with the trained transformer in both branches, musubi-tuner's LoRA-sampling default)
FAMILY_LEFT_OUT: dict[str, tuple[str, ...]] = {
    "ideogram4": ("unconditional_dit", "use_unconditional_dit_for_lora_sampling", "sampler_preset", "initial_sigma",
                  "log_loss_stats", "validate_caption_structure", "warn_on_caption_issues", "ideogram4_timestep_mu",
                  "ideogram4_timestep_std")}
# musubi-tuner's FLUX.2 model_version -> the published diffusers folder of that model
FLUX2_VERSIONS: dict[str, str] = {
    "dev": "black-forest-labs/FLUX.2-dev", "klein-4b": "black-forest-labs/FLUX.2-klein-4B",
    "klein-base-4b": "black-forest-labs/FLUX.2-klein-base-4B", "klein-9b": "black-forest-labs/FLUX.2-klein-9B",
    "klein-base-9b": "black-forest-labs/FLUX.2-klein-base-9B"}
# Key -> why it is refused (only when set): it changes what is trained and has no counterpart here.
REFUSED: dict[str, str] = {
    **{key: _FOLDER for key in _MODEL_FILES},
    "fp8_scaled": ("scaled fp8 weights are not available: fp8_base keeps the transformer in 8-bit floats without "
                   "scales (diffusers' layerwise casting, norms kept), base_model_precision = 'int8' its Linear "
                   "layers in 8-bit integers with per-channel scales"),
    "fp8_vl": "the text encoder runs in its own precision here (cache_text_encoder_outputs encodes captions once)",
    "fp8_llm": "the text encoder runs in its own precision here (cache_text_encoder_outputs encodes captions once)",
    "dit_dtype": "the transformer's precision follows mixed_precision (or full_bf16)",
    "num_layers": "a transformer with fewer layers than its file is not trained here",
    "remove_first_image_from_target": "Qwen-Image-Edit / Layered training is not available",
    "edit": "Qwen-Image-Edit training is not available",
    "edit_plus": "Qwen-Image-Edit training is not available",
    "preserve_distribution_shape": "min_timestep/max_timestep clip the noise levels here (as sd-scripts does)",
    "num_timestep_buckets": "noise levels are drawn per sample here, not from buckets",
    "gradient_checkpointing_cpu_offload": "gradient checkpointing keeps its activations on the GPU here",
    "full_fp16": "full fp16 training is not available; use full_bf16",
    "turbo_dit": "samples are rendered by the model being trained here, not by a second (Turbo) DiT",
}
# Options with no effect on what is trained: left out, said once.
SPEED_ONLY = ("flash_attn", "sage_attn", "xformers", "flash3", "split_attn", "compile", "compile_backend",
              "compile_mode", "compile_dynamic", "compile_fullgraph", "compile_cache_size_limit", "cuda_allow_tf32",
              "cuda_cudnn_benchmark", "use_pinned_memory_for_block_swap", "block_swap_h2d_only",
              "block_swap_ring_size", "disable_numpy_memmap", "img_in_txt_in_offloading", "vae_dtype",
              "use_32bit_attention", "show_timesteps", "mem_eff_save", "fused_backward_pass", "dynamo_mode",
              "dynamo_fullgraph", "dynamo_dynamic", "vae_chunk_size", "vae_spatial_tile_sample_min_size",
              "vae_tiling", "turbo_dit_cache")
# Options only HunyuanVideo reads in musubi-tuner: nothing for Qwen-Image or Z-Image.
HUNYUAN_ONLY = ("guidance_scale", "flow_shift")
# musubi-tuner's timestep_sampling values and the option ours reads them as (None: not available here).
TIMESTEP_SAMPLINGS: dict[str, str | None] = {
    **{name: name for name in ("sigma", "uniform", "sigmoid", "shift", "flux_shift", "qwen_shift", "flux2_shift",
                               "krea2_shift", "ideogram4_shift")},
    **{name: None for name in ("logsnr", "qinglong_flux", "qinglong_qwen")},
}
# musubi-tuner's defaults where ours would train differently, for options a file leaves out.
DEFAULTS: dict[str, Any] = {"timestep_sampling": "sigma", "discrete_flow_shift": 1.0, "weighting_scheme": "none",
                            "learning_rate": 2e-6, "network_dim": 4, "network_alpha": 1.0}
# musubi-tuner's fixed values per family, set whatever the file says (its guidance_scale is HunyuanVideo's)
FAMILY_FIXED: dict[str, dict[str, Any]] = {"flux2": {"guidance_scale": 1.0}}  # flux_2_train_network.py's guidance
# musubi-tuner's per-script defaults (its parser.set_defaults), over DEFAULTS for a file that leaves them out
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {"ideogram4": {"timestep_sampling": "ideogram4_shift"}}
MAX_TRAIN_STEPS = 1600  # with neither max_train_steps nor max_train_epochs


def is_musubi_file(flat: dict[str, Any]) -> bool:
    """Whether flat TOML keys are a musubi-tuner config: a musubi network module or a key only musubi writes (an
    sd-scripts HunyuanImage 2.1 file has fp8_scaled and fp8_vl too: its LoRA module or ByT5 file tells it)."""
    module = flat.get("network_module")
    if module == "networks.lora_hunyuan_image" or ("byt5" in flat and module != hunyuan_video15.MODULE):
        return False
    return bool(MUSUBI_KEYS & set(flat)) or (isinstance(module, str) and module.startswith("networks.lora_")
                                             and module in FAMILY_MODULES)


def read_musubi(flat: dict[str, Any], method: str, notes: list[str], issues: list[ConfigIssue]) -> dict[str, Any]:
    """`flat` (a musubi-tuner config's keys) as our options; refusals go to `issues`, translations to `notes`."""
    out = dict(flat)
    if flat.get("network_module") == wan.MODULE:  # its task names the family (trainers/adapters/musubi/wan.py)
        wan.read_wan(out, notes, issues)
    if flat.get("network_module") == hunyuan_video15.MODULE:  # its task names the folder (musubi/hunyuan_video15.py)
        hunyuan_video15.read_hunyuan_video15(out, notes, issues)
    _family(out, notes, issues)
    if hidream_o1.claims(flat):
        hidream_o1.read_hidream_o1(out, notes, issues)
    family = str(out.get("model_family"))
    if family == "flux2":
        _flux2_version(out, notes, issues)
    files = FILE_OPTIONS.get(family, {})
    for name, ours in files.items():
        if not blank(out.get(name)) and name != ours:
            out[ours] = out.pop(name)
            notes.append(f"{name} (musubi-tuner) is read as {ours}")
    for name, why in REFUSED.items():
        if name in files:
            continue
        if not blank(out.get(name)):
            why = FOLDER_ONLY.get(family, why) if name in _MODEL_FILES else why
            issues.append(ConfigIssue(name, f"{name} = {out[name]!r} (musubi-tuner) is refused: {why}"))
        out.pop(name, None)
    dropped = [name for name in (*SPEED_ONLY, *HUNYUAN_ONLY, *FAMILY_LEFT_OUT.get(family, ()))
               if not blank(out.pop(name, None))]
    if dropped:
        notes.append(f"musubi-tuner options left out: {', '.join(dropped)} (speed or sampling only here, or read by "
                     "HunyuanVideo only)")
    if out.pop("fp8_text_encoder", False):
        out["text_encoder_precision"] = "fp8"
        notes.append("fp8_text_encoder (musubi-tuner) is read as text_encoder_precision = 'fp8'")
    for name, value in FAMILY_FIXED.get(family, {}).items():
        out[name] = value
        notes.append(f"{name} = {value!r}: musubi-tuner trains {family} with it")
    _timestep_sampling(out, issues)
    if not wan.is_video_family(family):  # a video family reads musubi-tuner's image datasets too (1-frame clips)
        _dataset_config(out, issues)
    _defaults(out, method, notes)
    return out


def _family(out: dict[str, Any], notes: list[str], issues: list[ConfigIssue]) -> None:
    module = out.get("network_module")
    if not isinstance(module, str) or not module.startswith("networks.lora_"):
        return
    family = FAMILY_MODULES.get(module)
    if family is None:
        issues.append(ConfigIssue("network_module", f"network_module = {module!r} (musubi-tuner) is refused: its "
                                  f"family is not trained here; musubi-tuner's {', '.join(FAMILY_MODULES)} are"))
        return
    out["network_module"] = "networks.lora"
    out.setdefault("model_family", family)
    notes.append(f"network_module = {module!r} (musubi-tuner) is read as model_family = {family!r} with "
                 "network_module = 'networks.lora' (the family names the LoRA's keys as musubi-tuner does)")


def _flux2_version(out: dict[str, Any], notes: list[str], issues: list[ConfigIssue]) -> None:
    """musubi-tuner's model_version: here the diffusers folder's pipeline tells dev from klein, so it names the
    published folder when the file gives none."""
    version = out.pop("model_version", None)
    if blank(version):
        return
    folder = FLUX2_VERSIONS.get(str(version))
    if folder is None:
        issues.append(ConfigIssue("model_version", f"model_version = {version!r} (musubi-tuner) is not a FLUX.2 "
                                  f"model: choose one of {', '.join(FLUX2_VERSIONS)}"))
    elif blank(out.get("pretrained_model_name_or_path")):
        out["pretrained_model_name_or_path"] = folder
        notes.append(f"model_version = {version!r} (musubi-tuner) is read as pretrained_model_name_or_path = "
                     f"{folder!r}, its published diffusers folder")
    else:
        notes.append(f"model_version = {version!r} (musubi-tuner) is left out: the folder's model_index.json says "
                     "which FLUX.2 it is")


def _timestep_sampling(out: dict[str, Any], issues: list[ConfigIssue]) -> None:
    value = out.get("timestep_sampling")
    if isinstance(value, str) and value in TIMESTEP_SAMPLINGS and TIMESTEP_SAMPLINGS[value] is None:
        out.pop("timestep_sampling")
        issues.append(ConfigIssue("timestep_sampling", f"timestep_sampling = {value!r} (musubi-tuner) is refused: "
                                  f"not available here; choose one of "
                                  f"{', '.join(k for k, v in TIMESTEP_SAMPLINGS.items() if v)} ('shift' with "
                                  "discrete_flow_shift is musubi-tuner's advice for Qwen-Image and Z-Image; "
                                  "'qwen_shift', 'flux2_shift', 'krea2_shift' and 'ideogram4_shift' are "
                                  "Qwen-Image's, FLUX.2's, Krea 2's and Ideogram 4's only)"))


def _dataset_config(out: dict[str, Any], issues: list[ConfigIssue]) -> None:
    """musubi-tuner's dataset TOML (image_directory, cache_directory) is not sd-scripts': refused by name."""
    path = out.get("dataset_config")
    if not isinstance(path, str) or not path:
        return
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
        raw = tomllib.loads(text) if text else {}
        # a video dataset config is read as it is (trainers/data/video_toml.py) when a video family trains
        musubi = "image_directory" in raw.get("datasets", [{}])[0] and not is_video_dataset_config(raw)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, IndexError, AttributeError, TypeError):
        return  # the dataset check names what is wrong with it
    if musubi:
        out.pop("dataset_config")
        issues.append(ConfigIssue("dataset_config", f"{path} is a musubi-tuner dataset config (image_directory, "
                                  "cache_directory), which is not read here: set train_data_dir to the image folder "
                                  "(its captions beside the images) or write an sd-scripts dataset config"))


def _defaults(out: dict[str, Any], method: str, notes: list[str]) -> None:
    defaults = {**DEFAULTS, **FAMILY_DEFAULTS.get(str(out.get("model_family")), {})}
    used = {name: value for name, value in defaults.items() if name not in out
            and (method == "lora" or not name.startswith("network_"))}
    if "max_train_steps" not in out and "max_train_epochs" not in out:
        used["max_train_steps"] = MAX_TRAIN_STEPS
    out.update(used)
    if used:
        notes.append("musubi-tuner's defaults for options the file leaves out: "
                     + ", ".join(f"{name} = {value!r}" for name, value in used.items()))
