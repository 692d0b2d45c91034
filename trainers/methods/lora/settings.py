"""A LoRA run's network settings, resolved once from its options and `network_args` (torch-free).

sd-scripts users pass most network settings as `network_args = ["conv_dim=4", "algo=loha", ...]`; Atelier also
has options for the common ones. Both are accepted (not both for one key), every key is checked against what
the chosen network module takes, and `kwargs()` gives them back in sd-scripts' form for the module and for the
file's ss_network_args.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import BY_NAME, TrainConfig
from trainers.core.options.families import family_network_args
from trainers.core.options.groups.network import FUSED_LAYER_ARGS, NETWORK_ARG_OPTIONS
from trainers.methods.lora.blocks import LAYOUTS, block_lr_weights, parse_numbers

# network_args keys that are options of ours (value kinds for reading them from a string).
_KINDS = {"int": int, "float": float, "str": str}
OPTION_KEYS: dict[str, type] = {key: _KINDS[BY_NAME[key].kind] for key in NETWORK_ARG_OPTIONS}
_LORAPLUS = {"loraplus_lr_ratio", "loraplus_unet_lr_ratio", "loraplus_text_encoder_lr_ratio"}
# What each module takes in network_args besides nothing else (LyCORIS: lycoris/kohya.py create_network).
MODULE_KEYS: dict[str, set[str]] = {
    "networks.lora": set(OPTION_KEYS) | set(family_network_args()) | set(FUSED_LAYER_ARGS),
    "networks.dylora": {"conv_dim", "conv_alpha", "unit"} | _LORAPLUS,
    "lycoris.kohya": {"conv_dim", "conv_alpha", "dropout", "rank_dropout", "module_dropout", "algo", "preset",
                      "factor", "dora_wd", "wd_on_output", "use_tucker", "use_cp", "use_conv_cp", "disable_conv_cp",
                      "use_scalar", "block_size", "train_norm", "constraint", "rescaled", "full_matrix",
                      "bypass_mode", "rs_lora", "unbalanced_factorization", "decompose_both"} | _LORAPLUS,
}
LYCORIS_ALGOS = ("lora", "locon", "loha", "lokr", "ia3", "dylora", "full", "diag-oft", "boft", "glora")
LYCORIS_PRESETS = ("full", "full-lin", "attn-mlp", "attn-only", "unet-transformer-only", "unet-convblock-only", "ia3")


@dataclass(frozen=True)
class NetworkSettings:
    module: str
    dim: int
    alpha: float  # 0 is resolved to dim, as sd-scripts
    values: dict[str, Any]  # every OPTION_KEYS setting with its value (None: unset)
    extra: dict[str, str] = field(default_factory=dict)  # network_args keys that are not options (algo, unit...)
    dropout: float | None = None

    def get(self, key: str) -> Any:
        return self.values.get(key)

    @property
    def split_qkv(self) -> bool:
        """sd-scripts' split_qkv network_arg: each layer of a fused q/k/v module its own LoRA."""
        return self.extra.get("split_qkv", "False").lower() == "true"

    @property
    def conv_dim(self) -> int | None:
        return self.values["conv_dim"]

    @property
    def conv_alpha(self) -> float | None:
        """kohya's default conv alpha is 1 when conv_dim is set."""
        if self.conv_dim is None:
            return None
        return 1.0 if self.values["conv_alpha"] is None else float(self.values["conv_alpha"])

    def kwargs(self) -> dict[str, str]:
        """The settings as sd-scripts network kwargs (strings), in the order a user would write them."""
        out = {k: _text(v) for k, v in self.values.items() if v not in (None, "")}
        out.update(self.extra)
        return out

    def block_lr_weights(self, key_style: str) -> list[float] | None:
        return block_lr_weights(key_style, self.get("down_lr_weight") or "", self.get("mid_lr_weight") or "",
                                self.get("up_lr_weight") or "", float(self.get("block_lr_zero_threshold") or 0.0))

    def block_dims(self, key_style: str) -> tuple[list[int], list[float], list[int] | None, list[float] | None] | None:
        """(dims, alphas, conv dims, conv alphas) per block, or None without block-wise ranks (sd-scripts'
        get_block_dims_and_alphas, blocks with a zero learning-rate weight left out)."""
        lr_weights = self.block_lr_weights(key_style)
        if not self.get("block_dims") and lr_weights is None:
            return None
        count = LAYOUTS[key_style].total
        dims = [int(v) for v in parse_numbers(self.get("block_dims"), "block_dims", count, whole=True)] \
            if self.get("block_dims") else [self.dim] * count
        alphas = parse_numbers(self.get("block_alphas"), "block_alphas", count) if self.get("block_alphas") \
            else [self.alpha] * count
        conv_dims: list[int] | None = None
        conv_alphas: list[float] | None = None
        if self.get("conv_block_dims"):
            conv_dims = [int(v) for v in parse_numbers(self.get("conv_block_dims"), "conv_block_dims", count, True)]
            conv_alphas = parse_numbers(self.get("conv_block_alphas"), "conv_block_alphas", count) \
                if self.get("conv_block_alphas") else [self.conv_alpha or 1.0] * count
        elif self.conv_dim is not None:
            conv_dims, conv_alphas = [self.conv_dim] * count, [self.conv_alpha or 1.0] * count
        if lr_weights is not None:
            for i, weight in enumerate(lr_weights):
                if weight == 0:
                    dims[i] = 0
                    if conv_dims is not None:
                        conv_dims[i] = 0
        return dims, alphas, conv_dims, conv_alphas


def _text(value: Any) -> str:
    """As a user writes it on sd-scripts' command line: 16, not 16.0."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _read(key: str, raw: str) -> Any:
    kind = OPTION_KEYS[key]
    if kind is str:
        return raw
    try:
        number = float(raw)
    except ValueError:
        raise ValueError(f"network_args: {key}={raw!r} is not a number") from None
    if kind is int:
        if not number.is_integer():
            raise ValueError(f"network_args: {key}={raw!r} must be a whole number")
        return int(number)
    return number


def network_settings(cfg: TrainConfig) -> NetworkSettings:
    """The resolved settings; ConfigError with every problem (each naming its option or network_args key)."""
    issues: list[ConfigIssue] = []
    module = cfg.network_module
    values = {key: cfg.values.get(key) for key in OPTION_KEYS}
    values = {k: (None if v == "" else v) for k, v in values.items()}
    extra: dict[str, str] = {}
    allowed = MODULE_KEYS[module]
    for entry in cfg.network_args:
        key, sep, raw = str(entry).partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            issues.append(ConfigIssue("network_args", f"{entry!r} is not key=value (e.g. conv_dim=4)", "network"))
            continue
        if key not in allowed:
            guess = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"did you mean {guess[0]!r}? " if guess else ""
            issues.append(ConfigIssue("network_args", f"{key!r} is not an argument of {module}; {hint}it takes "
                                      f"{', '.join(sorted(allowed))}", "network"))
            continue
        if key in OPTION_KEYS:
            if values.get(key) is not None:
                issues.append(ConfigIssue("network_args", f"{key} is given both as an option and in network_args; "
                                          "keep one", "network"))
                continue
            try:
                values[key] = _read(key, raw)
            except ValueError as err:
                issues.append(ConfigIssue("network_args", str(err), "network"))
        else:
            extra[key] = raw
    for key, value in values.items():
        if value is not None and key not in allowed and key in cfg.values and cfg.values[key] not in (None, ""):
            issues.append(ConfigIssue(key, f"is not used by network_module = {module!r}: unset it, or use "
                                      "'networks.lora'", "network"))
    issues += _module_issues(module, extra, values, cfg)
    if issues:
        raise ConfigError(issues)
    alpha = cfg.network_alpha or cfg.network_dim
    return NetworkSettings(module, cfg.network_dim, float(alpha), values, extra, cfg.network_dropout)


def _module_issues(module: str, extra: dict[str, str], values: dict[str, Any], cfg: TrainConfig) -> list[ConfigIssue]:
    issues = []

    def bad(message: str, name: str = "network_args") -> None:
        issues.append(ConfigIssue(name, message, "network"))

    if module == "lycoris.kohya":
        algo = extra.get("algo", "lora").lower()
        if algo not in LYCORIS_ALGOS:
            bad(f"algo={algo!r} is not a LyCORIS algorithm; choose one of {', '.join(LYCORIS_ALGOS)}")
        preset = extra.get("preset", "full")
        if preset not in LYCORIS_PRESETS and not preset.endswith(".toml"):
            bad(f"preset={preset!r} is neither a LyCORIS preset ({', '.join(LYCORIS_PRESETS)}) nor a .toml file")
        if cfg.dim_from_weights:
            bad("is not available with lycoris.kohya: set network_dim (and conv_dim) to the file's", "dim_from_weights")
    if module == "networks.dylora":
        unit = extra.get("unit", "1")
        if not unit.isdigit() or int(unit) < 1 or cfg.network_dim % int(unit):
            bad(f"unit={unit!r}: DyLoRA's unit must be a whole number that divides network_dim ({cfg.network_dim})")
        if values.get("conv_dim") not in (None, cfg.network_dim):
            bad(f"DyLoRA trains the 3x3 convolutions at network_dim only: set conv_dim = {cfg.network_dim} or unset "
                "it", "conv_dim")
        if cfg.network_dropout or cfg.dim_from_weights:
            name = "network_dropout" if cfg.network_dropout else "dim_from_weights"
            bad("is not available with networks.dylora", name)
    if module == "networks.lora":
        if extra.get("split_qkv", "False").lower() not in ("true", "false"):
            bad(f"split_qkv={extra['split_qkv']!r}: write split_qkv=True (or False)")
        for key in ("block_dims", "block_alphas", "conv_block_dims", "conv_block_alphas"):
            text = values.get(key)
            if text is not None:
                try:
                    [float(p) for p in str(text).split(",")]
                except ValueError:
                    bad(f"{text!r} is not comma-separated numbers", key)
        if values.get("conv_block_alphas") and not values.get("conv_block_dims"):
            bad("needs conv_block_dims", "conv_block_alphas")
        if values.get("block_alphas") and not values.get("block_dims"):
            bad("needs block_dims", "block_alphas")
    return issues
