"""The plug-ins: training methods and model families. Adding one is its folder plus one line here.

Everything else is derived from these lists: the GUI's tabs, the CLI's subcommands, which options a
method uses, the model_family choices. Torch-free: the packages named here are imported only when
their code is needed (`trainers.methods.rules_for`, `trainers.models.family`; the torch-free `rules` of
both for Validate; the torch-free `options` of methods and families when the schema is built).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodSpec:
    name: str  # the CLI subcommand and the config's `method`
    title: str  # its tab in the GUI
    # What it trains: "network" (a network added to the frozen model: the LoRA options apply), "full" (the model's
    # own weights: the full-weight options apply), or a word of its own ("embeddings") that no shared option uses.
    trains: str
    # Its `options` module (torch-free, optional) declares its own options; `rules` (torch-free) its checks, outputs
    # and memory tips; `trainer` what it plugs into the loop. See trainers/methods/__init__.py.
    package: str
    help: str

    @property
    def options(self) -> str:
        return f"{self.package}.options"

    @property
    def rules(self) -> str:
        return f"{self.package}.rules"

    @property
    def trainer(self) -> str:
        return f"{self.package}.trainer"


@dataclass(frozen=True)
class FamilySpec:
    name: str  # model_family value
    package: str  # its `family` module holds the ModelFamily object named `attribute`; `rules` (torch-free) its rules
    attribute: str
    title: str  # its name in help texts (its rules' title, which messages use, is the same: a test checks it)

    @property
    def module(self) -> str:
        return f"{self.package}.family"

    @property
    def options(self) -> str:
        """Its `options` module (torch-free, optional): options of its own, and which shared ones it reads
        (trainers/core/options/families.py merges them); families of one package share it."""
        return f"{self.package}.options"

    @property
    def rules(self) -> str:
        return f"{self.package}.rules"


METHODS: tuple[MethodSpec, ...] = (
    MethodSpec("lora", "LoRA", "network", "trainers.methods.lora", "train a LoRA"),
    MethodSpec("dreambooth", "Dreambooth", "full", "trainers.methods.dreambooth",
               "train the model on your subject, with class (regularization) images"),
    MethodSpec("finetune", "Finetune", "full", "trainers.methods.finetune", "train the whole model"),
    MethodSpec("textual_inversion", "Textual inversion", "embeddings", "trainers.methods.textual_inversion",
               "learn a new word (an embedding) for SD1.x/2.x or SDXL"),
    MethodSpec("controlnet", "ControlNet", "controlnet", "trainers.methods.controlnet",
               "train a ControlNet (a control image steers the model) for SD1.x/2.x, SDXL or FLUX.1"),
)

FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec("sd1", "trainers.models.sd", "SD1", "SD1.x"),
    FamilySpec("sd2", "trainers.models.sd", "SD2", "SD2.x"),
    FamilySpec("sdxl", "trainers.models.sdxl", "SDXL", "SDXL"),
    FamilySpec("sd3", "trainers.models.sd3", "SD3", "SD3"),
    FamilySpec("flux", "trainers.models.flux", "FLUX", "FLUX.1"),
    FamilySpec("flux_kontext", "trainers.models.flux_kontext", "FLUX_KONTEXT", "FLUX.1 Kontext"),
    FamilySpec("chroma", "trainers.models.chroma", "CHROMA", "Chroma"),
    FamilySpec("zimage", "trainers.models.zimage", "ZIMAGE", "Z-Image"),
    FamilySpec("qwen_image", "trainers.models.qwen_image", "QWEN_IMAGE", "Qwen-Image"),
    FamilySpec("qwen_image_edit", "trainers.models.qwen_image_edit", "QWEN_IMAGE_EDIT", "Qwen-Image-Edit"),
    FamilySpec("qwen_image_edit_plus", "trainers.models.qwen_image_edit", "QWEN_IMAGE_EDIT_PLUS",
               "Qwen-Image-Edit-2509/2511"),
    FamilySpec("qwen_image21", "trainers.models.qwen_image21", "QWEN_IMAGE21", "Qwen-Image 2.1"),
    FamilySpec("hunyuan_image21", "trainers.models.hunyuan_image21", "HUNYUAN_IMAGE21", "HunyuanImage 2.1"),
    FamilySpec("hidream", "trainers.models.hidream", "HIDREAM", "HiDream-I1"),
    FamilySpec("lumina2", "trainers.models.lumina2", "LUMINA2", "Lumina 2"),
    FamilySpec("flux2", "trainers.models.flux2", "FLUX2", "FLUX.2"),
    FamilySpec("krea2", "trainers.models.krea2", "KREA2", "Krea 2"),
    FamilySpec("ideogram4", "trainers.models.ideogram4", "IDEOGRAM4", "Ideogram 4"),
    FamilySpec("ernie_image", "trainers.models.ernie_image", "ERNIE_IMAGE", "ERNIE-Image"),
    FamilySpec("anima", "trainers.models.anima", "ANIMA", "Anima"),
    FamilySpec("hidream_o1", "trainers.models.hidream_o1", "HIDREAM_O1", "HiDream-O1-Image"),
    FamilySpec("wan21", "trainers.models.wan", "WAN21", "Wan 2.1"),
    FamilySpec("wan22", "trainers.models.wan.wan22", "WAN22", "Wan 2.2"),
    FamilySpec("wan22_ti2v", "trainers.models.wan.ti2v", "WAN22_TI2V", "Wan 2.2 TI2V 5B"),
    FamilySpec("wan21_i2v", "trainers.models.wan.i2v21", "WAN21_I2V", "Wan 2.1 I2V"),
    FamilySpec("hunyuan_video15", "trainers.models.hunyuan_video15", "HUNYUAN_VIDEO15", "HunyuanVideo 1.5"),
    FamilySpec("ltx2", "trainers.models.ltx2", "LTX2", "LTX-2"),
)

# Translators of other tools' config files (trainers/adapters/): each module's claims(flat) says whether a flat
# TOML is that tool's, and read(flat, method, notes, issues) reads it as our options (sd-scripts' reader otherwise).
CONFIG_ADAPTERS: tuple[str, ...] = ("trainers.adapters.musubi", "trainers.adapters.sd_scripts_families")
# sd-scripts' and kohya_ss's formats: their keys in any flat config, kohya_ss JSON, and the flat TOML no adapter claims.
SD_SCRIPTS_ADAPTER = "trainers.adapters.kohya"

METHOD_NAMES: tuple[str, ...] = tuple(m.name for m in METHODS)
FAMILY_NAMES: tuple[str, ...] = tuple(f.name for f in FAMILIES)


def method_spec(name: str) -> MethodSpec:
    for spec in METHODS:
        if spec.name == name:
            return spec
    raise KeyError(f"unknown method {name!r}; known: {', '.join(METHOD_NAMES)}")


def methods_training(kind: str) -> frozenset[str]:
    """The methods that train a network (LoRA options apply) or the full weights."""
    return frozenset(m.name for m in METHODS if m.trains == kind)


def only(*names: str) -> frozenset[str]:
    """The named methods (checked against the registry: a typo fails at import, not silently)."""
    for name in names:
        method_spec(name)
    return frozenset(names)
