"""Which programs load a LoRA file, and the keys each would leave out: a prediction from the key names and weight
kinds each loader maps (ComfyUI's comfy/lora.py and weight adapters, A1111's and Forge's built-in Lora extension,
diffusers' load_lora_weights, sd-scripts' networks.lora), not a run of them. Torch-free.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

ALL_TYPES = frozenset({"LoRA", "LoCon", "LoCon (Tucker)", "LoHa", "LoKr", "IA3", "full (diff)", "norm", "GLoRA", "OFT",
                       "BOFT"})
_ATTENTION = (".to_q", ".to_k", ".to_v", ".to_out.0")
FAMILY = "family"  # the key format of a family's own LoRA file naming (ModelFamily.lora_file), which both read
TO_KOHYA = "it reads kohya's names: tools convert --to kohya writes them"


@dataclass(frozen=True)
class Loader:
    name: str
    formats: frozenset[str]  # key formats it maps
    types: frozenset[str]  # module types it applies (a DoRA module counts as its kind plus dora_scale)
    own_styles: bool  # it maps kohya names of the families that name their own modules (SD3, FLUX)
    dora: bool  # it applies dora_scale / lora_magnitude_vector
    note: str = ""
    one_kohya_alpha: bool = False  # it gives a kohya file's attention and text-encoder layers its most common alpha

    def takes(self, kind: str, fmt: str, style: str | None) -> bool:
        base = kind.removeprefix("DoRA (").removesuffix(")")
        if fmt not in self.formats or base not in self.types:
            return False
        if fmt == "kohya" and style == "own" and not self.own_styles:
            return False
        return True


LOADERS = (
    Loader("ComfyUI", frozenset({"kohya", "comfyui", "diffusers", FAMILY}), ALL_TYPES - {"IA3"}, own_styles=True,
           dora=True,
           note="maps diffusers-format UNet attention layers only under their old `.processor.` names"),
    Loader("A1111", frozenset({"kohya"}), ALL_TYPES, own_styles=False, dora=True,
           note="its built-in Lora extension maps SD1, SD2 and SDXL names"),
    Loader("Forge", frozenset({"kohya"}), ALL_TYPES, own_styles=True, dora=True,
           note="A1111's extension, and FLUX's kohya names (Forge runs no SD3 model)"),
    Loader("diffusers", frozenset({"kohya", "diffusers", FAMILY}), frozenset({"LoRA", "LoCon", "LoKr"}),
           own_styles=True, dora=False, note="drops dora_scale with a warning; reads FLUX's kohya names but not SD3's "
                                             "(Atelier's Generate converts both)", one_kohya_alpha=True),
    Loader("sd-scripts", frozenset({"kohya"}), frozenset({"LoRA", "LoCon"}), own_styles=True, dora=False,
           note="networks.lora reads lora_down/lora_up/alpha; other LyCORIS kinds load with --network_module "
                "lycoris.kohya"),
)


@dataclass
class Verdict:
    loader: str
    status: str  # "yes", "partly" or "no"
    ignored: list[str] = field(default_factory=list)  # tensor names it would not load
    note: str = ""


NONE = "none"  # a Verdict's status where the program has no loader of the family's LoRAs at all


def _ignored_keys(loader: Loader, module: str, kind: str, suffixes: set[str], fmt: str, style: str | None) -> list[str]:
    keys = [f"{module}.{s}" for s in sorted(suffixes)]
    if not loader.takes(kind, fmt, style):
        return keys
    if fmt == "diffusers" and loader.name == "ComfyUI" and style != "own" and module.startswith("unet.") \
            and module.endswith(_ATTENTION):
        return keys
    if not loader.dora:
        return [k for k in keys if k.endswith((".dora_scale", ".lora_magnitude_vector"))]
    return []


VARIED_ALPHAS = ("its modules' alphas differ, and diffusers gives its attention and text-encoder layers the most "
                 "common one of their part (the patterns it builds from kohya names match none of them): {count} "
                 "load at the wrong strength. tools resize or merge write one alpha; tools convert --to diffusers keeps each")
_PATTERNLESS = re.compile(r"^lora_te\d?_|_attn\d_to_(q|k|v|out_0)$")  # the modules whose alpha pattern misses


_COMPONENT = re.compile(r"^lora_(unet|te2|te1?)_")


def _misread_alphas(alphas: Mapping[str, float], style: str | None) -> int:
    """How many modules diffusers would give their component's most common alpha instead of their own. diffusers
    builds one LoRA config per component (the UNet, each text encoder) from that component's alphas alone, so the
    alpha a misread module gets is its component's most common one (the first seen of a tie, in the file's order)."""
    if style == "own" or len(set(alphas.values())) < 2:
        return 0
    by_component: dict[str, list[tuple[str, float]]] = {}
    for name, alpha in alphas.items():
        found = _COMPONENT.match(name)
        by_component.setdefault(found[1].replace("te1", "te") if found else "", []).append((name, alpha))
    misread = 0
    for modules in by_component.values():
        common = Counter(alpha for _, alpha in modules).most_common(1)[0][0]
        misread += sum(1 for name, alpha in modules if alpha != common and _PATTERNLESS.search(name))
    return misread


def verdicts(modules: Mapping[str, set[str]], kinds: Mapping[str, str], fmt: str, style: str | None,
             alphas: Mapping[str, float] | None = None, missing: frozenset[str] = frozenset()) -> list[Verdict]:
    """For each loader: does it load the file (every key, some, none) and which keys it would leave out.
    `modules`: module name -> its tensors' suffixes; `kinds`: module name -> its type (lora_state.module_type);
    `alphas`: module name -> its alpha; `missing`: the loaders the file's family has none of (its rules'
    lora_loaders_missing): status NONE, whatever the keys."""
    misread = _misread_alphas(alphas or {}, style) if fmt == "kohya" else 0
    total = sum(len(s) for s in modules.values())
    out = []
    for loader in LOADERS:
        if loader.name in missing:
            out.append(Verdict(loader.name, NONE, note=f"{loader.name} has no loader of this model family's LoRAs"))
            continue
        ignored = [key for name, suffixes in modules.items()
                   for key in _ignored_keys(loader, name, kinds[name], suffixes, fmt, style)]
        status = "yes" if not ignored else "no" if len(ignored) == total else "partly"
        note = TO_KOHYA if fmt == FAMILY and FAMILY not in loader.formats else loader.note
        if loader.one_kohya_alpha and misread and status != "no":
            status, note = "partly", f"{VARIED_ALPHAS.format(count=misread)}; {note}"
        out.append(Verdict(loader.name, status, ignored, note))
    return out
