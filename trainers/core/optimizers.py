"""The optimizers `optimizer_type` names, without torch: which class each builds and what `optimizer_args` it takes.

Names, classes and defaults follow kohya sd-scripts' `get_optimizer`. The keyword table is checked against the
real classes' signatures by tests/train/test_optimizers.py, so it cannot drift from the installed libraries.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# "package.module.Class", or a bare name looked up in torch.optim (as sd-scripts does).
CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
CLASS_PATH_HELP = "a module.Class path such as 'torch.optim.RMSprop' (sd-scripts' custom optimizer)"
# The optimizer classes in torch.optim (a bare optimizer_type such as 'RMSprop' means torch.optim.RMSprop).
TORCH_OPTIMIZERS = ("ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "Muon", "NAdam",
                    "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam")


@dataclass(frozen=True)
class Rule:
    """What one keyword argument accepts: `expects` is shown to the user, `ok` decides."""

    expects: str
    ok: Callable[[Any], bool]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
           example: str = "") -> Rule:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi:g}")
    text = "a number" + (" " + " and ".join(parts) if parts else "") + (f", e.g. {example}" if example else "")

    def ok(v: Any) -> bool:
        if not _is_number(v):
            return False
        if lo is not None and (v <= lo if lo_open else v < lo):
            return False
        return hi is None or (v < hi if hi_open else v <= hi)

    return Rule(text, ok)


def integer(lo: int = 0) -> Rule:
    return Rule(f"a whole number >= {lo}", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo)


def choice(*values: Any) -> Rule:
    return Rule("one of " + ", ".join(repr(v) for v in values), lambda v: not isinstance(v, bool) and v in values)


FLAG = Rule("True or False", lambda v: isinstance(v, bool))
ANY = Rule("any value", lambda v: True)


def maybe(rule: Rule) -> Rule:
    return Rule(f"None or {rule.expects}", lambda v: v is None or rule.ok(v))


def betas(n: int, closed: bool = False, example: str = "") -> Rule:
    """n numbers from 0 to below 1 (to 1 with `closed`), written like betas=0.9,0.999."""
    top = "1" if closed else "below 1"

    def ok(v: Any) -> bool:
        return (isinstance(v, (tuple, list)) and len(v) == n
                and all(_is_number(b) and 0 <= b and (b <= 1 if closed else b < 1) for b in v))

    return Rule(f"{n} numbers from 0 to {top}, e.g. {example}", ok)


def eps_pair(example: str) -> Rule:
    def ok(v: Any) -> bool:
        return isinstance(v, (tuple, list)) and len(v) == 2 and all(_is_number(e) and e >= 0 for e in v)

    return Rule(f"2 numbers >= 0, e.g. {example}", ok)


EPS = number(0, lo_open=True, example="1e-8")
DECAY = number(0, example="0.01")
BETAS2 = betas(2, example="betas=0.9,0.999")
BETAS_LION = betas(2, example="betas=0.9,0.99")
BETAS_ADAN = betas(3, example="betas=0.98,0.92,0.99")
MOMENTUM = number(0, 1, hi_open=True, example="0.9")
MAYBE_FLAG = maybe(FLAG)
GROWTH = number(0, lo_open=True, example="1.02 (unset: no limit)")
D0 = number(0, lo_open=True, example="1e-6")

TORCH_EXTRAS = {"maximize": FLAG, "foreach": MAYBE_FLAG, "differentiable": FLAG, "fused": MAYBE_FLAG}
BNB_EXTRAS = {"args": ANY, "min_8bit_size": integer(0)}
ADAM = {"betas": BETAS2, "eps": EPS, "weight_decay": DECAY, "amsgrad": FLAG}
DADAPT = {"log_every": integer(0), "d0": D0}
SCHEDULE_FREE = {"weight_decay": DECAY, "r": number(0), "weight_lr_power": number(0), "foreach": MAYBE_FLAG}


@dataclass(frozen=True)
class OptimizerSpec:
    name: str  # as optimizer_type spells it
    target: str  # "module.Class" it builds
    args: dict[str, Rule]  # what optimizer_args may set
    fixed: dict[str, Any] = field(default_factory=dict)  # always passed by us; optimizer_args may not set them
    defaults: dict[str, Any] = field(default_factory=dict)  # passed unless optimizer_args sets them
    paged: bool = False  # bitsandbytes pages its state to CPU memory (CUDA only; on CPU it runs unpaged)
    adaptive: bool = False  # D-Adaptation / Prodigy: the learning rate is a multiplier, ~1.0

    @property
    def schedule_free(self) -> bool:
        return is_schedule_free(self.name)

    @property
    def package(self) -> str:
        return self.target.split(".")[0]


def _spec(name: str, target: str, args: dict[str, Rule], **kw: Any) -> OptimizerSpec:
    return OptimizerSpec(name, target, args, **kw)


_SPECS = (
    _spec("AdamW", "torch.optim.AdamW", {**ADAM, **TORCH_EXTRAS, "capturable": FLAG}),
    _spec("AdamW8bit", "bitsandbytes.optim.AdamW8bit",
          {**ADAM, **BNB_EXTRAS, "optim_bits": choice(8, 32), "is_paged": FLAG}),
    _spec("PagedAdamW", "bitsandbytes.optim.PagedAdamW", {**ADAM, **BNB_EXTRAS, "optim_bits": choice(8, 32)},
          paged=True),
    _spec("PagedAdamW8bit", "bitsandbytes.optim.PagedAdamW8bit", {**ADAM, **BNB_EXTRAS, "optim_bits": choice(8, 32)},
          paged=True),
    _spec("PagedAdamW32bit", "bitsandbytes.optim.PagedAdamW32bit",
          {**ADAM, **BNB_EXTRAS, "optim_bits": choice(8, 32)}, paged=True),
    # sd-scripts builds Lion from lion-pytorch, which is not installed here: bitsandbytes' 32-bit Lion is the same
    # algorithm (see the optimizer_type help).
    _spec("Lion", "bitsandbytes.optim.Lion",
          {"betas": BETAS_LION, "weight_decay": DECAY, "optim_bits": choice(8, 32), "is_paged": FLAG, **BNB_EXTRAS}),
    _spec("Lion8bit", "bitsandbytes.optim.Lion8bit",
          {"betas": BETAS_LION, "weight_decay": DECAY, "is_paged": FLAG, **BNB_EXTRAS}),
    _spec("PagedLion8bit", "bitsandbytes.optim.PagedLion8bit", {"betas": BETAS_LION, "weight_decay": DECAY,
                                                                 **BNB_EXTRAS}, paged=True),
    _spec("SGDNesterov", "torch.optim.SGD",
          {"momentum": number(0, lo_open=True, example="0.9"), "dampening": choice(0), "weight_decay": DECAY,
           **TORCH_EXTRAS}, fixed={"nesterov": True}, defaults={"momentum": 0.9}),
    _spec("SGDNesterov8bit", "bitsandbytes.optim.SGD8bit",
          {"momentum": number(0, lo_open=True, example="0.9"), "dampening": choice(0), "weight_decay": DECAY,
           **BNB_EXTRAS}, fixed={"nesterov": True}, defaults={"momentum": 0.9}),
    *(_spec(name, "dadaptation.experimental.DAdaptAdamPreprint",  # DAdaptation: sd-scripts' alias
            {"betas": BETAS2, "eps": EPS, "weight_decay": DECAY, "decouple": FLAG, "growth_rate": GROWTH,
             "fsdp_in_use": FLAG, **DADAPT}, adaptive=True) for name in ("DAdaptation", "DAdaptAdamPreprint")),
    _spec("DAdaptAdam", "dadaptation.DAdaptAdam",
          {"betas": BETAS2, "eps": EPS, "weight_decay": DECAY, "decouple": FLAG, "use_bias_correction": FLAG,
           "growth_rate": GROWTH, "fsdp_in_use": FLAG, **DADAPT}, adaptive=True),
    _spec("DAdaptLion", "dadaptation.DAdaptLion",
          {"betas": BETAS_LION, "weight_decay": DECAY, "fsdp_in_use": FLAG, **DADAPT}, adaptive=True),
    _spec("DAdaptAdan", "dadaptation.DAdaptAdan",
          {"betas": BETAS_ADAN, "eps": EPS, "weight_decay": DECAY, "no_prox": FLAG, "growth_rate": GROWTH, **DADAPT},
          adaptive=True),
    _spec("DAdaptAdanIP", "dadaptation.experimental.DAdaptAdanIP",
          {"betas": BETAS_ADAN, "eps": EPS, "weight_decay": DECAY, "no_prox": FLAG, "growth_rate": GROWTH, **DADAPT},
          adaptive=True),
    _spec("DAdaptSGD", "dadaptation.DAdaptSGD",
          {"momentum": MOMENTUM, "weight_decay": DECAY, "growth_rate": GROWTH, "fsdp_in_use": FLAG, **DADAPT},
          adaptive=True),
    _spec("DAdaptAdaGrad", "dadaptation.DAdaptAdaGrad",
          {"momentum": MOMENTUM, "weight_decay": DECAY, "eps": EPS, "growth_rate": GROWTH, **DADAPT}, adaptive=True),
    _spec("Prodigy", "prodigyopt.Prodigy",
          {"betas": BETAS2, "beta3": maybe(number(0, 1, hi_open=True)), "eps": EPS, "weight_decay": DECAY,
           "decouple": FLAG, "use_bias_correction": FLAG, "safeguard_warmup": FLAG, "d0": D0,
           "d_coef": number(0, lo_open=True, example="1.0"), "growth_rate": GROWTH, "fsdp_in_use": FLAG,
           "slice_p": integer(1)}, adaptive=True),
    _spec("Adafactor", "transformers.optimization.Adafactor",
          {"eps": eps_pair("eps=1e-30,1e-3"), "clip_threshold": number(0, lo_open=True, example="1.0"),
           "decay_rate": number(hi=0, example="-0.8"), "beta1": maybe(number(0, 1, hi_open=True)),
           "weight_decay": DECAY, "scale_parameter": FLAG, "relative_step": FLAG, "warmup_init": FLAG},
          defaults={"relative_step": True}),
    _spec("AdamWScheduleFree", "schedulefree.AdamWScheduleFree",
          {"betas": BETAS2, "eps": EPS, "warmup_steps": integer(0), **SCHEDULE_FREE}),
    _spec("RAdamScheduleFree", "schedulefree.RAdamScheduleFree",
          {"betas": BETAS2, "eps": EPS, "silent_sgd_phase": FLAG, **SCHEDULE_FREE}),
    _spec("SGDScheduleFree", "schedulefree.SGDScheduleFree",
          {"momentum": MOMENTUM, "warmup_steps": integer(0), **SCHEDULE_FREE}),
    # Not an sd-scripts name (there: optimizer_type = "came_pytorch.CAME"); the same class.
    _spec("CAME", "came_pytorch.CAME",
          {"eps": eps_pair("eps=1e-30,1e-16"), "clip_threshold": number(0, lo_open=True, example="1.0"),
           "betas": betas(3, closed=True, example="betas=0.9,0.999,0.9999"), "weight_decay": DECAY}),
)
BUILT_IN: dict[str, OptimizerSpec] = {s.name: s for s in _SPECS}
OPTIMIZER_NAMES: tuple[str, ...] = tuple(BUILT_IN)
# Set by the trainer itself: optimizer_args may not set them.
RESERVED = {"params": "the trained weights are passed by the trainer",
            "lr": "set learning_rate (and unet_lr / text_encoder_lr) instead"}


def is_schedule_free(optimizer_type: str) -> bool:
    """sd-scripts' test (by name, so 'schedulefree.AdamWScheduleFree' counts too)."""
    return optimizer_type.lower().endswith("schedulefree")


def spec_for(optimizer_type: str) -> OptimizerSpec | None:
    """The built-in optimizer `optimizer_type` names (case-insensitively, as sd-scripts), or None for a class path."""
    wanted = optimizer_type.lower()
    return next((s for s in _SPECS if s.name.lower() == wanted), None)


def class_path(optimizer_type: str) -> tuple[str, str]:
    """(module, class) of a class-path optimizer_type: 'a.b.C' -> ('a.b', 'C'), 'C' -> ('torch.optim', 'C')."""
    module, _, name = optimizer_type.rpartition(".")
    return module or "torch.optim", name


def parse_args(entries: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """optimizer_args / lr_scheduler_args as sd-scripts reads them: 'key=value', the value through ast.literal_eval
    (so betas=0.9,0.99 is a tuple), a string where literal_eval refuses it. Returns (kwargs, malformed entries)."""
    import ast

    kwargs: dict[str, Any] = {}
    malformed: list[str] = []
    for entry in entries:
        key, sep, raw = str(entry).partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            malformed.append(str(entry))
            continue
        try:
            kwargs[key] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            kwargs[key] = raw.strip()
    return kwargs, malformed


def text_encoder_rates(cfg: Any) -> list[float]:
    """The text encoders' learning rates: text_encoder_lr as one value or one per encoder (sd-scripts), else
    learning_rate. With one value, every encoder gets it."""
    given = cfg.text_encoder_lr if isinstance(cfg.text_encoder_lr, list) else [cfg.text_encoder_lr]
    return [cfg.learning_rate if lr is None else float(lr) for lr in given]
