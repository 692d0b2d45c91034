"""A LoRA file as the tools see it: its tensors grouped into modules, each module's network type, and writing a
result (metadata kept and updated, sd-scripts' sshs hashes recomputed, a temp file renamed into place).

A module is what one layer (or one fused layer) of the model gets: `lora_unet_..._to_q` with its
`lora_down.weight`, `lora_up.weight` and `alpha`, or LyCORIS' `hada_*`, `lokr_*`, ... under the same name.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from trainers.core.errors import ToolError
from trainers.core.fsio import read_safetensors_header
from trainers.methods.lora.file_format import save_lora_file, with_hashes
from trainers.models.single_file import SAVE_DTYPES

# What follows a module's name in a key, longest first (LyCORIS' names as its loaders read them).
SUFFIXES = tuple(sorted((
    "lora_down.weight", "lora_up.weight", "lora_mid.weight", "lora_A.weight", "lora_B.weight", "alpha",
    "dora_scale", "lora_magnitude_vector", "hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b", "hada_t1", "hada_t2",
    "lokr_w1", "lokr_w2", "lokr_w1_a", "lokr_w1_b", "lokr_w2_a", "lokr_w2_b", "lokr_t2", "diff", "diff_b", "w_norm",
    "b_norm", "on_input", "weight", "bias", "a1.weight", "a2.weight", "b1.weight", "b2.weight", "oft_blocks",
    "oft_diag", "oft_R", "boft_R", "boft_blocks", "rescale",
), key=len, reverse=True))
PLAIN = frozenset({"lora_down.weight", "lora_up.weight", "alpha"})  # what sd-scripts' networks.lora reads
PEFT = frozenset({"lora_A.weight", "lora_B.weight"})


def split_key(key: str) -> tuple[str, str]:
    """(module, suffix) of a tensor name; an unknown suffix is the name's last part."""
    for suffix in SUFFIXES:
        if key.endswith("." + suffix):
            return key[:-len(suffix) - 1], suffix
    module, _, last = key.rpartition(".")
    return module, last


def module_type(parts: Mapping[str, Tensor]) -> str:
    """The network type of one module from the weights it holds (LoRA and LoCon are told apart by the kernel)."""
    names = set(parts)
    if names & {"lora_down.weight", "lora_A.weight"}:
        down = parts.get("lora_down.weight", parts.get("lora_A.weight"))
        kind = "LoCon" if down is not None and down.dim() == 4 and tuple(down.shape[2:]) != (1, 1) else "LoRA"
        if "lora_mid.weight" in names:
            kind = "LoCon (Tucker)"
        return f"DoRA ({kind})" if names & {"dora_scale", "lora_magnitude_vector"} else kind
    for marker, kind in (("hada_", "LoHa"), ("lokr_", "LoKr"), ("a1.", "GLoRA"), ("oft_", "OFT"), ("boft_", "BOFT")):
        if any(n.startswith(marker) for n in names):
            return f"DoRA ({kind})" if "dora_scale" in names else kind
    if "on_input" in names:
        return "IA3"
    if names & {"diff", "diff_b"}:
        return "full (diff)"
    if names & {"w_norm", "b_norm"}:
        return "norm"
    return "unknown"


@dataclass
class LoraFile:
    path: Path
    tensors: dict[str, Tensor]
    metadata: dict[str, str]
    modules: dict[str, dict[str, Tensor]] = field(default_factory=dict)  # module -> {suffix: tensor}

    def __post_init__(self) -> None:
        for key, tensor in self.tensors.items():
            module, suffix = split_key(key)
            self.modules.setdefault(module, {})[suffix] = tensor

    def types(self) -> Counter:
        return Counter(module_type(parts) for parts in self.modules.values())

    def dtype(self) -> torch.dtype:
        """The precision most of its floating tensors have."""
        found = Counter(t.dtype for t in self.tensors.values() if t.is_floating_point())
        return found.most_common(1)[0][0] if found else torch.float32

    def plain(self, option: str) -> dict[str, "LowRankModule"]:
        """Every module as (down, up, alpha); ToolError names the first module of another kind."""
        out = {}
        for name, parts in self.modules.items():
            if not set(parts) <= PLAIN or not {"lora_down.weight", "lora_up.weight"} <= set(parts):
                held = ", ".join(sorted(parts))
                raise ToolError(option, f"{self.path}: module {name} is {module_type(parts)} ({held}); only LoRA and "
                                f"LoCon files in kohya's keys (lora_down/lora_up/alpha) can be used here"
                                f"{_convert_hint(parts)}")
            down, up = parts["lora_down.weight"], parts["lora_up.weight"]
            if up.dim() < 2 or up.shape[1] != down.shape[0]:
                raise ToolError(option, f"{self.path}: module {name} does not fit together: its lora_down is "
                                f"{tuple(down.shape)} (rank {down.shape[0]}) and its lora_up {tuple(up.shape)}; the "
                                "file is damaged or mixes two LoRAs: use the file as it was written")
            alpha = parts.get("alpha")
            out[name] = LowRankModule(down, up, float(alpha) if alpha is not None else float(down.shape[0]))
        return out


@dataclass
class LowRankModule:
    """One LoRA module: its change to the layer's weight is up @ down * alpha / rank."""

    down: Tensor  # (rank, in) or (rank, in, kh, kw)
    up: Tensor  # (out, rank) or (out, rank, 1, 1)
    alpha: float

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def delta(self, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Tensor:
        """The weight change in `dtype`, shaped as the layer's weight."""
        down, up = self.down.to(device, dtype), self.up.to(device, dtype)
        return (up.flatten(1) @ down.flatten(1)).reshape(up.shape[0], *down.shape[1:]) * self.scale

    def tensors(self, name: str) -> dict[str, Tensor]:
        return {f"{name}.lora_down.weight": self.down, f"{name}.lora_up.weight": self.up,
                f"{name}.alpha": torch.tensor(float(self.alpha))}


def one_alpha(modules: dict[str, LowRankModule]) -> dict[str, LowRankModule]:
    """The same changes with one alpha for every module (the most common one), a module's own alpha / rank folded
    into its up weights. diffusers gives every attention and text-encoder layer of a kohya file the file's most
    common alpha (the alpha patterns it builds from kohya names match none of them), so a result whose alphas varied
    by module (a dynamic rank, LoRAs merged side by side) would render wrongly there; every other loader computes
    alpha / rank x up @ down per module and reads both forms alike."""
    if len({m.alpha for m in modules.values()}) <= 1:
        return modules
    common = Counter(m.alpha for m in modules.values()).most_common(1)[0][0]
    return {name: m if m.alpha == common else LowRankModule(m.down, m.up * (m.alpha / common), common)
            for name, m in modules.items()}


def _convert_hint(parts: Mapping[str, Tensor]) -> str:
    return " (convert it to kohya keys first: tools convert --to kohya)" if set(parts) & PEFT else ""


def read_lora(path: str | Path, option: str) -> LoraFile:
    """The tensors (CPU) and metadata of a LoRA file; ToolError names the option for a missing, damaged or
    cut-short file and for a file that holds no LoRA."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ToolError(option, f"{path} does not exist; check the path")
    try:
        read_safetensors_header(path, whole=True)  # every tensor's bytes inside the file, before any is read
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
            metadata = dict(handle.metadata() or {})
    except (SafetensorError, OSError, ValueError) as err:
        why = str(err).removeprefix(f"{path} ")
        raise ToolError(option, f"{path} is not a complete .safetensors file ({why}): it was probably cut short while "
                        "downloading or copying; fetch it again") from None
    found = LoraFile(path, tensors, metadata)
    if not any(set(parts) - {"alpha"} for parts in found.modules.values()) or found.types() == Counter(
            {"unknown": len(found.modules)}):
        raise ToolError(option, f"{path} holds no LoRA weights: is it a model? Give a LoRA file")
    return found


def save_precision(choice: str, found: torch.dtype) -> torch.dtype:
    """The dtype of a result: `auto` keeps `found` (the input's)."""
    return found if choice == "auto" else SAVE_DTYPES[choice]


def refuse_existing(path: Path, option: str = "save_to") -> None:
    if path.exists():
        raise ToolError(option, f"{path} exists; the tools never overwrite a file: give another name (or remove it)")


def write_lora(path: Path, tensors: Mapping[str, Tensor], metadata: Mapping[str, str], dtype: torch.dtype) -> Path:
    """Save `tensors` (floating ones in `dtype`) with `metadata`, the hashes recomputed over the saved tensors."""
    refuse_existing(path)
    cast = {k: (v.to(dtype) if v.is_floating_point() else v).detach().cpu().contiguous() for k, v in tensors.items()}
    kept = {k: v for k, v in metadata.items() if not k.startswith("sshs_")}
    save_lora_file(path, cast, with_hashes(cast, kept))
    return path


def updated_metadata(metadata: Mapping[str, str], title: str, comment: str, **changes: object) -> dict[str, str]:
    """`metadata` with a new title and date, `comment` put before ss_training_comment (as sd-scripts' tools do),
    and `changes` (None removes a key)."""
    out = dict(metadata)
    old = out.get("ss_training_comment", "")
    out["ss_training_comment"] = f"{comment}; {old}" if old and old != "None" else comment
    out["modelspec.title"] = title
    out["modelspec.date"] = datetime.now().isoformat(timespec="seconds")
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value if isinstance(value, str) else json.dumps(value) if isinstance(value, dict) else str(value)
    return out


def dims_text(ranks: list[int]) -> str:
    """ss_network_dim of a result: the rank when every module has the same, else sd-scripts' "Dynamic"."""
    return str(ranks[0]) if ranks and len(set(ranks)) == 1 else "Dynamic"


def alpha_text(modules: list[LowRankModule]) -> str:
    """ss_network_alpha of a result, as dims_text."""
    alphas = {f"{m.alpha:g}" for m in modules}
    return alphas.pop() if len(alphas) == 1 else "Dynamic"
