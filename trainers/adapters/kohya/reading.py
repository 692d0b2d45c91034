"""sd-scripts files read with sd-scripts' meaning (torch-free).

A file sd-scripts reads (a `--config_file` TOML, or what kohya_ss passes it for one of its JSON configs) may
need translating: a list of learning rates, 0/1 flags, train_db.py's text encoder, multires noise, LyCORIS
arguments. Options such a file leaves out take sd-scripts' default where ours would train differently. Every
translation is said once, as a note.
"""
from __future__ import annotations

import math
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.adapters.kohya.compat import (
    DREAMBOOTH_TRAINS_TEXT_ENCODER,
    FAMILY_FLAGS,
    FAMILY_LORA_MODULES,
    NO_CLIP_SKIP,
)
from trainers.adapters.kohya.keys import (
    LYCORIS_UNREAD,
    NETWORK_MODULES,
    SAMPLERS,
    SD_SCRIPTS_DEFAULTS,
    SD_SCRIPTS_MAX_TRAIN_STEPS,
    blank,
    show,
)
from trainers.core.options.training import BY_NAME

# sd-scripts' spellings of a T5 dtype (library/utils.py str_to_dtype) -> t5xxl_dtype's
T5_DTYPES = {"float32": "float32", "fp32": "float32", "float": "float32", "float16": "fp16", "fp16": "fp16",
             "bfloat16": "bf16", "bf16": "bf16"}


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _number_above(text: str, limit: int) -> bool:
    try:
        return float(text) > limit
    except ValueError:
        return False


def _is_zero(text: str | None) -> bool:
    try:
        return text is not None and float(text) == 0
    except ValueError:
        return False


class SdScriptsFile:
    """Translate one sd-scripts file's flat keys into our options (see `read`)."""

    def __init__(self, flat: dict[str, Any], method: str) -> None:
        self.flat = dict(flat)
        self.method = method
        self.notes: list[str] = []
        self.issues: list[ConfigIssue] = []
        self.per_encoder_rates = False  # learning_rate_te1/te2 were given: an sdxl_train.py config

    def uses(self, name: str) -> bool:
        return name in BY_NAME and self.method in BY_NAME[name].methods

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def bad(self, name: str, message: str) -> None:
        self.issues.append(ConfigIssue(name, message))

    def move(self, old: str, new: str, value: Any, why: str) -> None:
        """`old` (a key of sd-scripts) becomes option `new`; an explicit `new` wins, with a note."""
        self.flat.pop(old, None)
        if new in self.flat:
            self.note(f"{old} is not used: {new} is given too")
            return
        self.flat[new] = value
        self.note(f"{old} = {show(value)} is read as {new} = {show(value)} ({why})")

    def read(self) -> dict[str, Any]:
        """The flat options of the file as sd-scripts would read it."""
        self._flags_as_bools()
        self._aliases()
        self._length()
        self._learning_rates()
        self._text_encoder()
        self._adafactor_warmup()
        self._noise()
        self._network()
        self._samples_and_saves()
        self._resolution()
        self._clip_skip()
        self._defaults()
        return self.flat

    def _flags_as_bools(self) -> None:
        # sd-scripts reads a flag by its truth: kohya_ss writes persistent_data_loader_workers = 0 or 1.
        for name, value in list(self.flat.items()):
            if name in BY_NAME and BY_NAME[name].kind == "bool" and type(value) is int and value in (0, 1):
                self.flat[name] = bool(value)

    def _aliases(self) -> None:
        f = self.flat
        if "caption_extention" in f:
            self.move("caption_extention", "caption_extension", f["caption_extention"], "sd-scripts' old spelling")
        for flag, optimizer in (("use_8bit_adam", "AdamW8bit"), ("use_lion_optimizer", "Lion")):
            if flag in f:
                if not blank(f.pop(flag)):
                    self.move(flag, "optimizer_type", optimizer, "sd-scripts' old optimizer flag")
        if "deepspeed" in f:
            if not blank(f.pop("deepspeed")):
                self.move("deepspeed", "distributed_backend", "deepspeed", "DeepSpeed through a per-run accelerate "
                          "config")
        if "offload_optimizer_device" in f:
            device = f.pop("offload_optimizer_device")
            if device == "cpu":
                self.move("offload_optimizer_device", "offload_optimizer", True, "ZeRO-Offload to the CPU")
            elif not blank(device):
                self.bad("offload_optimizer_device", f"{device!r} is refused: only CPU offload is available "
                         "(offload_optimizer = true)")
        dtype = f.get("t5xxl_dtype")
        if isinstance(dtype, str) and dtype.lower() in T5_DTYPES:
            f["t5xxl_dtype"] = T5_DTYPES[dtype.lower()]
        if "torch_compile" in f:
            if not blank(f.pop("torch_compile")) and "dynamo_backend" not in f:
                self.move("torch_compile", "dynamo_backend", "inductor", "sd-scripts' default backend")
        for flag, family in FAMILY_FLAGS.items():
            if flag in f and self.uses("model_family"):
                if blank(f.pop(flag)):
                    continue
                if f.get("model_family", family) != family:
                    self.note(f"{flag} = true is not used: model_family = {f['model_family']!r} is given too")
                elif "model_family" not in f:
                    f["model_family"] = family
                    self.note(f"{flag} = true is read as model_family = {family!r} (the model must be one)")

    def _length(self) -> None:
        f = self.flat
        epoch = f.pop("epoch", None)  # kohya_ss's GUI field, written to the file but not read by sd-scripts
        if not blank(epoch):
            self.note(f"epoch = {show(epoch)} (kohya_ss) is not used: sd-scripts does not read it (kohya_ss turns it "
                      "into max_train_steps); max_train_epochs sets the epochs")
        ratio = f.pop("save_n_epoch_ratio", None)
        if not blank(ratio):
            epochs = f.get("max_train_epochs")
            if isinstance(epochs, int) and isinstance(ratio, (int, float)) and ratio > 0:
                self.move("save_n_epoch_ratio", "save_every_n_epochs", max(1, math.floor(epochs / ratio)),
                          f"{epochs} epochs / {ratio}")
            else:
                self.bad("save_n_epoch_ratio", "is refused without max_train_epochs: set save_every_n_epochs")
        if "max_train_epochs" not in f and "max_train_steps" not in f and self.uses("max_train_steps"):
            f["max_train_steps"] = SD_SCRIPTS_MAX_TRAIN_STEPS
            self.note(f"max_train_steps = {SD_SCRIPTS_MAX_TRAIN_STEPS}: sd-scripts' default, as the file sets "
                      "neither max_train_steps nor max_train_epochs")

    def _learning_rates(self) -> None:
        f = self.flat
        value = f.get("text_encoder_lr")
        if isinstance(value, list):  # sd-scripts takes one rate per text encoder
            rates = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if len(rates) != len(value):
                return  # the option's own check names the value
            if not rates:
                del f["text_encoder_lr"]
            elif len(set(rates)) == 1:  # the same rate for every text encoder: our one rate
                f["text_encoder_lr"] = rates[0]
        if self.uses("text_encoder_lr"):
            if "learning_rate_te" in f:
                self.move("learning_rate_te", "text_encoder_lr", f["learning_rate_te"], "train_db.py's and "
                          "fine_tune.py's name for it")
            if "learning_rate_te1" in f or "learning_rate_te2" in f:
                self._per_encoder_rates()
        else:
            for name in ("learning_rate_te", "learning_rate_te1", "learning_rate_te2"):
                if name in f:
                    f.pop(name)
                    self.note(f"{name} is not used by {self.method} training (sd-scripts' LoRA scripts do not read "
                              "it either): text_encoder_lr sets the text encoder's rate")

    def _per_encoder_rates(self) -> None:
        """sdxl_train.py's learning_rate_te1/te2 (unset: learning_rate; 0: that encoder is not trained)."""
        f = self.flat
        self.per_encoder_rates = True
        base = f.get("learning_rate", SD_SCRIPTS_DEFAULTS["learning_rate"])
        te1, te2 = f.pop("learning_rate_te1", None), f.pop("learning_rate_te2", None)
        rates = [base if r is None else r for r in (te1, te2)]
        if rates[0] != rates[1] and 0 in rates:
            name = "learning_rate_te1" if rates[0] == 0 else "learning_rate_te2"
            self.bad(name, "0 leaves one text encoder untrained while the other trains, which is not available: "
                     "train both (one rate, text_encoder_lr) or neither (train_text_encoder = false)")
        elif rates[0] != rates[1] and "text_encoder_lr" not in f:
            f["text_encoder_lr"] = rates
            self.note(f"learning_rate_te1 and learning_rate_te2 are read as text_encoder_lr = [{rates[0]:g}, "
                      f"{rates[1]:g}] (one rate per text encoder)")
        elif rates[0] == 0:
            if f.pop("train_text_encoder", False):
                self.note("train_text_encoder = true is read as false: learning_rate_te1 and _te2 are 0")
            f["train_text_encoder"] = False
        elif "text_encoder_lr" not in f:
            f["text_encoder_lr"] = rates[0]
            self.note(f"learning_rate_te1 and learning_rate_te2 are read as text_encoder_lr = {rates[0]:g}")

    def _text_encoder(self) -> None:
        """train_db.py (sd-scripts' Dreambooth for SD1.x/SD2.x) trains the text encoder unless
        stop_text_encoder_training < 0; sdxl_train.py, fine_tune.py and Atelier only when asked."""
        f = self.flat
        if not self.uses("stop_text_encoder_training") or "train_text_encoder" in f or self.per_encoder_rates:
            return
        stop = f.get("stop_text_encoder_training")
        if type(stop) is int and stop < 0:
            del f["stop_text_encoder_training"]
            f["train_text_encoder"] = False
            self.note(f"stop_text_encoder_training = {stop} is read as train_text_encoder = false (train_db.py's "
                      "way of leaving the text encoder alone)")
            return
        family = f.get("model_family", "auto")
        family = family if isinstance(family, str) else "auto"  # another type is refused by the option's check
        if DREAMBOOTH_TRAINS_TEXT_ENCODER.get(family, True):
            f["train_text_encoder"] = True
            self.note("train_text_encoder = true: train_db.py trains the text encoder unless "
                      "stop_text_encoder_training < 0" + ("" if family in DREAMBOOTH_TRAINS_TEXT_ENCODER else
                                                          " (for an SDXL config, sdxl_train.py does not: set "
                                                          "train_text_encoder = false)"))

    def _adafactor_warmup(self) -> None:
        """sd-scripts runs Adafactor with relative_step (its default) on Adafactor's own schedule, without warmup."""
        f = self.flat
        args = f.get("optimizer_args")
        entries = [str(a).replace(" ", "").lower() for a in (args if isinstance(args, list) else str(args).split())]
        relative = "relative_step=false" not in entries
        if str(f.get("optimizer_type", "")).lower() == "adafactor" and relative and not blank(f.get("lr_warmup_steps")):
            self.note(f"lr_warmup_steps = {show(f.pop('lr_warmup_steps'))} is left out: Adafactor with relative_step "
                      "runs its own schedule, which sd-scripts starts without warmup")

    def _noise(self) -> None:
        """sd-scripts adds multires noise exactly when multires_noise_iterations is set (noise_offset_type is
        kohya_ss's GUI field), and reads the noise strengths only with the noise they scale."""
        f = self.flat
        wanted = "Original" if blank(f.get("multires_noise_iterations")) else "Multires"
        given = f.get("noise_offset_type")
        if not isinstance(given, str) or given.lower() != wanted.lower():
            if given is not None:
                self.note(f"noise_offset_type = {show(given)} is read as {wanted!r}: sd-scripts adds multires noise "
                          "exactly when multires_noise_iterations is set")
            elif wanted == "Multires":
                self.note("noise_offset_type = 'Multires': sd-scripts adds multires noise whenever "
                          "multires_noise_iterations is set")
            f["noise_offset_type"] = wanted
        unread = [("multires_noise_discount", wanted == "Original", "multires_noise_iterations"),
                  ("adaptive_noise_scale", blank(f.get("noise_offset")), "noise_offset"),
                  ("noise_offset_random_strength", blank(f.get("noise_offset")), "noise_offset"),
                  ("ip_noise_gamma_random_strength", blank(f.get("ip_noise_gamma")), "ip_noise_gamma")]
        for name, unused, needs in unread:
            if unused and name in f:
                value = f.pop(name)
                if not blank(value) and (name not in BY_NAME or value != BY_NAME[name].default):
                    self.note(f"{name} = {show(value)} is left out: sd-scripts reads it only with {needs}")

    def _network(self) -> None:
        f = self.flat
        module = f.get("network_module")
        if module in FAMILY_LORA_MODULES:
            module = f["network_module"] = "networks.lora"
            self.note("network_module is read as 'networks.lora': it trains SD3 and FLUX too (the model names its keys)")
        if isinstance(module, str) and module in NETWORK_MODULES:
            self.bad("network_module", f"{module!r} is refused: {NETWORK_MODULES[module]}")
        args = f.get("network_args")
        if isinstance(args, str):
            args = args.split()
        if not isinstance(args, list):
            return
        lycoris = module == "lycoris.kohya"
        entries: dict[str, str | None] = {}  # key -> value (None: an entry that is not key=value, kept as typed)
        for entry in args:  # kohya_ss writes some twice (use_tucker): the first one counts
            key, sep, value = str(entry).replace('"', "").partition("=")
            entries.setdefault(key.strip() if sep else str(entry), value.strip() if sep else None)
        dropped = [f"{k}={entries.pop(k)}" for k in LYCORIS_UNREAD if lycoris and k in entries]
        if dropped:
            self.note(f"network_args {', '.join(dropped)}: left out, as LyCORIS's kohya entry point does not read "
                      "them")
        if lycoris and entries.get("algo", "").lower() == "lokr":
            self._lokr_full_matrix(entries)
        if lycoris:  # LyCORIS reads conv_dim / conv_alpha 0 as network_dim / network_alpha
            for key, fallback in (("conv_dim", "network_dim"), ("conv_alpha", "network_alpha")):
                if _is_zero(entries.get(key)):
                    entries[key] = _text(f.get(fallback, SD_SCRIPTS_DEFAULTS[fallback]))
                    self.note(f"network_args {key}=0 is read as {key}={entries[key]}: LyCORIS reads 0 as {fallback}")
        elif _is_zero(entries.get("conv_dim")):
            del entries["conv_dim"]
            entries.pop("conv_alpha", None)
            self.note("network_args conv_dim=0 is left out: it trains no convolutions (as in sd-scripts)")
        f["network_args"] = [k if v is None else f"{k}={v}" for k, v in entries.items()]

    def _lokr_full_matrix(self, entries: dict[str, str | None]) -> None:
        """LyCORIS trains LoKr with full matrices when the rank is at least half a factor's size; kohya_ss's presets
        ask for that with a rank of 100000, beyond our network_dim's range: full_matrix=True says it directly."""
        f = self.flat
        top = int(BY_NAME["network_dim"].max or 1024)
        dim, conv = f.get("network_dim"), entries.get("conv_dim")
        if not (isinstance(dim, int) and dim > top):
            return
        f["network_dim"] = top
        entries.setdefault("full_matrix", "True")
        if conv is not None and _number_above(conv, top):
            entries["conv_dim"] = str(top)
        self.note(f"network_dim = {dim} (LyCORIS LoKr) is read as network_args full_matrix=True, network_dim = {top}: "
                  "a rank that large trains full matrices, and full_matrix=True says so")

    def _samples_and_saves(self) -> None:
        f = self.flat
        if blank(f.get("sample_prompts")) and blank(f.get("sample_prompt_lines")):
            unused = [n for n in ("sample_every_n_steps", "sample_every_n_epochs", "sample_at_first")
                      if not blank(f.pop(n, None))]
            if unused:
                self.note(f"{', '.join(unused)} is left out: there are no sample_prompts, and sd-scripts makes no "
                          "samples without them")
        sampler = f.get("sample_sampler")
        if isinstance(sampler, str) and sampler in SAMPLERS:
            f["sample_sampler"] = SAMPLERS[sampler]
            self.note(f"sample_sampler = {sampler!r} is read as {SAMPLERS[sampler]!r} (sample images only)")
        steps = f.get("bucket_reso_steps")
        if isinstance(steps, (int, float)) and not isinstance(steps, bool) and 0 < steps < 8:
            f["bucket_reso_steps"] = 8
            self.note(f"bucket_reso_steps = {steps} is read as 8: bucket sides are multiples of 8 here (the VAE's "
                      "scale)")
        saved_as = f.get("save_model_as")
        if self.uses("save_model_as") and isinstance(saved_as, str):
            if saved_as == "diffusers_safetensors":
                f["save_model_as"] = "diffusers"
                self.note("save_model_as = 'diffusers_safetensors' is read as 'diffusers' (a diffusers folder of "
                          "safetensors files)")
            elif saved_as in ("ckpt", "pt"):
                self.bad("save_model_as", f"{saved_as!r} is refused: pickle files are not written; use "
                         "'safetensors' (one file, the original layout) or 'diffusers'")

    def _resolution(self) -> None:
        """sd-scripts takes sides that are not multiples of 8 (kohya_ss presets have '512,650'): without buckets it
        crops the images to that size, and the VAE's 8x downscale drops the rest, so the latents trained on are
        those of the sides rounded down to a multiple of 8; with buckets the resolution only sets their area."""
        value = self.flat.get("resolution")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return
        sides = [p.strip() for p in str(value).replace("x", ",").split(",")]
        if len(sides) > 2 or not all(p.isdigit() for p in sides) or all(int(p) % 8 == 0 for p in sides):
            return
        rounded = [int(p) - int(p) % 8 for p in sides]
        if min(rounded) < 64:
            return  # the option's check names it
        self.flat["resolution"] = ",".join(map(str, rounded))
        if self.flat.get("enable_bucket"):
            given, kept = math.prod(int(p) for p in sides), math.prod(rounded)
            why = (f"with buckets sd-scripts reads it as the largest bucket area, here {100 * (1 - kept / given):.1f}% "
                   "smaller")
        else:
            why = (f"sd-scripts crops the images to {'x'.join(sides)} and trains on latents of "
                   f"{'x'.join(str(r // 8) for r in rounded)}, the VAE's 8x downscale dropping the rest: the same "
                   "latents as this size")
        self.note(f"resolution = {show(value)} is read as {self.flat['resolution']!r} (sides in multiples of 8): {why}")

    def _clip_skip(self) -> None:
        """sd-scripts' SDXL, SD3 and FLUX scripts do not read clip_skip (sdxl_train.py warns that it "will be
        unexpected"): a config for one of them is read without it."""
        family = self.flat.get("model_family")
        if family in NO_CLIP_SKIP and "clip_skip" in self.flat:
            value = self.flat.pop("clip_skip")
            if not blank(value) and value != 1:
                self.note(f"clip_skip = {show(value)} is left out: sd-scripts' {family.upper()} scripts do not read it "
                          "(the text encoders' layers are fixed)")

    def _defaults(self) -> None:
        # sd-scripts saves in the trained weights' own precision when save_precision is unset
        saved = {"save_precision": "bf16" if self.flat.get("full_bf16") is True else "float"}
        used = {name: value for name, value in {**SD_SCRIPTS_DEFAULTS, **saved}.items()
                if name not in self.flat and self.uses(name)}
        self.flat.update(used)
        if used:
            shown = ", ".join(f"{name} = {value!r}" for name, value in used.items())
            self.note(f"sd-scripts' defaults for options the file leaves out: {shown}")


def read_sd_scripts(flat: dict[str, Any], method: str, notes: list[str], issues: list[ConfigIssue]) -> dict[str, Any]:
    """`flat` (the keys of an sd-scripts file, sections merged) as our options, read with sd-scripts' meaning."""
    reader = SdScriptsFile(flat, method)
    out = reader.read()
    notes.extend(n for n in reader.notes if n not in notes)
    issues.extend(reader.issues)
    return out
