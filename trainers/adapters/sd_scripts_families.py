"""sd-scripts' keys of the flow families that came after FLUX.1 and SD3, read as Atelier's (torch-free): Chroma
(flux_train_network.py with `model_type = "chroma"`), Lumina Image 2.0 (lumina_train_network.py, its
networks.lora_lumina and library/lumina_train_util.py's options) and HunyuanImage 2.1 (hunyuan_image_train_network.py,
its networks.lora_hunyuan_image). A config adapter (trainers/core/registry.py CONFIG_ADAPTERS):
it claims the sd-scripts files of these families, reads their own keys, and leaves the rest to sd-scripts' reader
(trainers/adapters/kohya/reading.py). Anima (anima_train_network.py and anima_train.py, networks.lora_anima) too.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.adapters.kohya.reading import read_sd_scripts
from trainers.models.anima.rules import TEXT_LENGTH as ANIMA_TEXT_LENGTH
from trainers.models.lumina2.rules import SYSTEM_PROMPT as LUMINA_SYSTEM_PROMPT
from trainers.models.lumina2.rules import TEXT_LENGTH as LUMINA_TEXT_LENGTH

# sd-scripts' model_type values trained here -> model_family (None: the model's files tell)
MODEL_TYPES: dict[str, str | None] = {"flux": None, "chroma": "chroma"}
LUMINA_MODULE = "networks.lora_lumina"
# lumina_train_network.py's defaults where ours would train differently, for options a Lumina file leaves out
LUMINA_DEFAULTS: dict[str, Any] = {"timestep_sampling": "shift", "discrete_flow_shift": 6.0,
                                   "model_prediction_type": "raw"}
LUMINA_SPEED_ONLY = ("use_flash_attn", "use_sage_attn")
HUNYUAN_MODULE = "networks.lora_hunyuan_image"
# hunyuan_image_train_network.py's defaults where ours would train differently (its argparse defaults)
HUNYUAN_DEFAULTS: dict[str, Any] = {"timestep_sampling": "sigma", "discrete_flow_shift": 5.0,
                                    "model_prediction_type": "raw"}
HUNYUAN_SPLIT_FILES = ("text_encoder", "byt5", "vae")  # its Qwen2.5-VL, ByT5 and autoencoder files
HUNYUAN_SPEED_ONLY = ("attn_mode", "split_attn", "vae_chunk_size", "text_encoder_cpu")
# its options read as ours (what they keep in 8-bit floats)
HUNYUAN_READ_AS = {"fp8_scaled": ("fp8_base", True), "fp8_vl": ("text_encoder_precision", "fp8")}
ANIMA_MODULE = "networks.lora_anima"
# anima_train_network.py's argparse defaults where ours would train differently
ANIMA_DEFAULTS: dict[str, Any] = {"timestep_sampling": "sigmoid", "discrete_flow_shift": 1.0}
ANIMA_FILES = {"qwen3": "text_encoder", "vae": "ae"}  # its Qwen3 and VAE files, read as ours
ANIMA_LENGTHS = ("qwen3_max_token_length", "t5_max_token_length")
ANIMA_SPEED_ONLY = ("attn_mode", "split_attn", "vae_chunk_size", "vae_disable_cache", "unsloth_offload_checkpointing")
# its per-component learning rates of a finetune (None: the base rate)
ANIMA_COMPONENT_LRS = ("llm_adapter_lr", "self_attn_lr", "cross_attn_lr", "mlp_lr", "mod_lr")


def claims(flat: dict[str, Any]) -> bool:
    """A Chroma, Lumina 2 or HunyuanImage 2.1 file of sd-scripts: its model_type, its LoRA module, or its Gemma 2 or
    ByT5 file."""
    return (MODEL_TYPES.get(str(flat.get("model_type"))) is not None or flat.get("network_module") == LUMINA_MODULE
            or "gemma2" in flat or is_hunyuan_image(flat) or is_anima(flat))


def is_anima(flat: dict[str, Any]) -> bool:
    """An Anima file of sd-scripts: its LoRA module or its Qwen3 file (anima_train.py names no network module)."""
    return flat.get("network_module") == ANIMA_MODULE or "qwen3" in flat


def is_hunyuan_image(flat: dict[str, Any]) -> bool:
    """A HunyuanImage 2.1 file of sd-scripts (its LoRA module or its ByT5 file), whose fp8_* keys musubi-tuner's
    files have too."""
    return flat.get("network_module") == HUNYUAN_MODULE or "byt5" in flat


def read(flat: dict[str, Any], method: str, notes: list[str], issues: list[ConfigIssue]) -> dict[str, Any]:
    """`flat` as our options: the family's own keys here, the rest with sd-scripts' meaning."""
    out = dict(flat)

    def note(text: str) -> None:
        if text not in notes:
            notes.append(text)

    read_family_keys(out, note, lambda name, message: issues.append(ConfigIssue(name, message)))
    return read_sd_scripts(out, method, notes, issues)


def read_family_keys(flat: dict[str, Any], note: Callable[[str], None], bad: Callable[[str, str], None]) -> None:
    """Set model_family from sd-scripts' model_type (Chroma) or LoRA module (Lumina), and read Lumina's keys: those
    Atelier honours are checked and left out, the others refused by name."""
    if is_hunyuan_image(flat):
        _hunyuan_keys(flat, note)
        return
    if is_anima(flat):
        _anima_keys(flat, note, bad)
        return
    sd_scripts_type = str(flat.get("model_type"))
    family = MODEL_TYPES.get(sd_scripts_type)
    if sd_scripts_type in MODEL_TYPES:  # FLUX.1's scripts' switch, not HiDream-O1's model_type (musubi-tuner's)
        flat.pop("model_type")
    if family and "model_family" not in flat:
        flat["model_family"] = family
        note(f"model_type = {sd_scripts_type!r} is read as model_family = {family!r}")
    if flat.get("network_module") == LUMINA_MODULE:
        flat["network_module"] = "networks.lora"
        note(f"network_module = {LUMINA_MODULE!r} is read as model_family = 'lumina2' with network_module = "
             "'networks.lora' (the family names the LoRA's keys as sd-scripts does)")
    elif "gemma2" not in flat:  # lumina_train.py (a finetune) names its Gemma 2 file
        return
    flat.setdefault("model_family", "lumina2")
    _lumina_keys(flat, note, bad)


def _lumina_keys(flat: dict[str, Any], note: Callable[[str], None], bad: Callable[[str, str], None]) -> None:
    gemma = flat.pop("gemma2", None)  # its Gemma 2 file beside the model file (and ae, read as ours)
    if gemma:
        flat["text_encoder"] = gemma
        note("gemma2 (sd-scripts' Gemma 2 file) is read as text_encoder")
    length = flat.pop("gemma2_max_token_length", None)
    if length not in (None, "", LUMINA_TEXT_LENGTH):
        bad("gemma2_max_token_length", f"gemma2_max_token_length = {length!r} is refused: Gemma 2 reads "
            f"{LUMINA_TEXT_LENGTH} tokens here (sd-scripts' default and Lumina2Pipeline's)")
    prompt = str(flat.pop("system_prompt", "") or "").strip()
    if prompt and prompt != LUMINA_SYSTEM_PROMPT:
        bad("system_prompt", f"system_prompt = {prompt[:60]!r} is refused: captions are read after "
            f"Lumina2Pipeline's system prompt ({LUMINA_SYSTEM_PROMPT!r}) here; leave it out")
    elif not prompt:
        note("captions are read after Lumina2Pipeline's system prompt here (sd-scripts reads them without one "
             "when system_prompt is not set)")
    dropped = [name for name in LUMINA_SPEED_ONLY if flat.pop(name, None)]
    if dropped:
        note(f"{', '.join(dropped)} left out: attention always uses PyTorch SDPA here")
    used = {name: value for name, value in LUMINA_DEFAULTS.items() if name not in flat}
    flat.update(used)
    if used:
        note("lumina_train_network.py's defaults for options the file leaves out: "
             + ", ".join(f"{name} = {value!r}" for name, value in used.items()))


def _hunyuan_keys(flat: dict[str, Any], note: Callable[[str], None]) -> None:
    """HunyuanImage 2.1's: its module and fp8 options read as ours, its split files and speed options left out (it
    is read from a diffusers folder here), sd-scripts' defaults for the flow options the file leaves out."""
    if flat.get("network_module") == HUNYUAN_MODULE:
        flat["network_module"] = "networks.lora"
        note(f"network_module = {HUNYUAN_MODULE!r} is read as model_family = 'hunyuan_image21' with network_module = "
             "'networks.lora' (the family names the LoRA's keys as ComfyUI does, sd-scripts' names read too)")
    flat.setdefault("model_family", "hunyuan_image21")
    dit = str(flat.get("pretrained_model_name_or_path") or "").lower().endswith((".safetensors", ".ckpt", ".pt"))
    if dit and flat.get("vae"):  # its DiT file with the split files beside it, as ComfyUI's users have them
        flat["ae"] = flat.pop("vae")
        note("vae (sd-scripts' HunyuanImage 2.1 autoencoder file) is read as ae; text_encoder and byt5 as they are")
    files = [name for name in HUNYUAN_SPLIT_FILES if not dit and flat.pop(name, None)]
    if files:
        note(f"{', '.join(files)} (sd-scripts' split files) left out: they are read beside its DiT .safetensors "
             "file, and pretrained_model_name_or_path is none")
    for name, (ours, value) in HUNYUAN_READ_AS.items():
        if flat.pop(name, None):
            flat[ours] = value
            note(f"{name} is read as {ours} = {value!r} (8-bit floats without scales here)")
    dropped = [name for name in HUNYUAN_SPEED_ONLY if flat.pop(name, None) not in (None, "", False)]
    if dropped:
        note(f"{', '.join(dropped)} left out: speed only here (PyTorch SDPA attention, text encoder outputs cached)")
    used = {name: value for name, value in HUNYUAN_DEFAULTS.items() if name not in flat}
    flat.update(used)
    if used:
        note("hunyuan_image_train_network.py's defaults for options the file leaves out: "
             + ", ".join(f"{name} = {value!r}" for name, value in used.items()))


def _anima_keys(flat: dict[str, Any], note: Callable[[str], None], bad: Callable[[str, str], None]) -> None:
    """Anima's: its module, Qwen3 and VAE files read as ours (llm_adapter_path and t5_tokenizer_path are ours too),
    its token lengths at their 512, its speed options left out, its per-component learning rates refused by name,
    sd-scripts' defaults for the flow options the file leaves out."""
    if flat.get("network_module") == ANIMA_MODULE:
        flat["network_module"] = "networks.lora"
        note(f"network_module = {ANIMA_MODULE!r} is read as model_family = 'anima' with network_module = "
             "'networks.lora' (the family names the LoRA's keys as sd-scripts does)")
    flat.setdefault("model_family", "anima")
    for theirs, ours in ANIMA_FILES.items():
        if flat.get(theirs):
            flat[ours] = flat.pop(theirs)
            note(f"{theirs} (sd-scripts' Anima {'Qwen3' if theirs == 'qwen3' else 'VAE'} file) is read as {ours}")
        else:
            flat.pop(theirs, None)
    for name in ANIMA_LENGTHS:
        length = flat.pop(name, None)
        if length not in (None, "", ANIMA_TEXT_LENGTH):
            bad(name, f"{name} = {length!r} is refused: Anima reads {ANIMA_TEXT_LENGTH} tokens here (sd-scripts' "
                "default, the LLM adapter's 512 queries)")
    for name in ANIMA_COMPONENT_LRS:
        if flat.pop(name, None) is not None:
            bad(name, f"{name} (a learning rate of one part of Anima's denoiser) is not available here: every part "
                "trains at learning_rate; leave it unset")
    if flat.pop("qwen_image_vae_2d", None):
        bad("qwen_image_vae_2d", "is not available here: the Qwen-Image VAE runs as its published network")
    dropped = [name for name in ANIMA_SPEED_ONLY if flat.pop(name, None) not in (None, "", False)]
    if dropped:
        note(f"{', '.join(dropped)} left out: speed and memory only here (PyTorch SDPA attention)")
    used = {name: value for name, value in ANIMA_DEFAULTS.items() if name not in flat}
    flat.update(used)
    if used:
        note("anima_train_network.py's defaults for options the file leaves out: "
             + ", ".join(f"{name} = {value!r}" for name, value in used.items()))
