"""What the flow-matching families (SD3, FLUX) share: a run's settings, their option checks, their text tokenization.

Both read captions with CLIP tokenizers (77 tokens, one chunk) and a T5 tokenizer (t5xxl_max_token_length tokens),
as sd-scripts' strategies for them do; neither takes clip skip, max_token_length or weighted captions.
"""
from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.errors import ConfigIssue
from trainers.core.options.groups.flow import OPTIONS as FLOW_OPTIONS
from trainers.models.base import ModelFiles
from trainers.models.flow_checkpoint import Part, part_issues
from trainers.models.prompt_chunks import PromptTruncated

CLIP_LENGTH = 77
_DEFAULTS = {o.name: o.default for o in FLOW_OPTIONS}


@dataclass(frozen=True)
class FlowSettings:
    """The flow-matching options of a run (trainers/core/options/groups/flow.py has their meanings)."""

    timestep_sampling: str = _DEFAULTS["timestep_sampling"]
    sigmoid_scale: float = _DEFAULTS["sigmoid_scale"]
    discrete_flow_shift: float = _DEFAULTS["discrete_flow_shift"]
    model_prediction_type: str = _DEFAULTS["model_prediction_type"]
    guidance_scale: float = _DEFAULTS["guidance_scale"]
    weighting_scheme: str = _DEFAULTS["weighting_scheme"]
    logit_mean: float = _DEFAULTS["logit_mean"]
    logit_std: float = _DEFAULTS["logit_std"]
    mode_scale: float = _DEFAULTS["mode_scale"]
    training_shift: float = _DEFAULTS["training_shift"]
    t5xxl_max_token_length: int | None = _DEFAULTS["t5xxl_max_token_length"]
    apply_t5_attn_mask: bool = _DEFAULTS["apply_t5_attn_mask"]
    apply_lg_attn_mask: bool = _DEFAULTS["apply_lg_attn_mask"]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "FlowSettings":
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


class FlowFamily:
    """Mixin of the flow families: settings per run, shared option checks and tokenization."""

    unet_key_style = "own"  # lora_targets names the modules after the reference code
    objective = "flow"
    denoiser_folder = "transformer"
    supports_clip_skip = False
    detect_priority = 3
    native_size = 1024
    single_file_text_encoders = ()  # their single files are read by flow_checkpoint.py, not by single_file/
    settings: FlowSettings = FlowSettings()
    flow_target: str = "velocity"  # what the loss compares: the velocity (FLUX) or a latents estimate (SD3)
    title: str
    own_options: frozenset[str]  # the flow options this family reads
    default_t5_length: int
    reference_prefixes: tuple[str, ...]  # key prefixes of its reference (single-file) checkpoints
    transformer_class: str  # its denoiser's diffusers class

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        # pipeline_class (ModelFamily): model_index.json's _class_name of the family's diffusers folders
        return str(index.get("_class_name", "")) == self.pipeline_class

    # --- single files in the reference layout (flow_checkpoint.py reads them; the family converts its denoiser) ---

    own_checkpoint_layout = True
    checkpoint_parts: tuple[Part, ...]  # its text encoders (in load order) and autoencoder
    latent_scaling: tuple[float, float]  # the autoencoder's (scaling, shift) factors: in its config, not its file

    def claims_checkpoint(self, keys: Any) -> bool:
        return any(keys.has(prefix) for prefix in self.reference_prefixes)

    def checkpoint_issues(self, keys: Any, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        return part_issues(self.checkpoint_parts, keys, files, vae_path, self.title)

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        from trainers.models.flow_checkpoint import load_flow_checkpoint

        return load_flow_checkpoint(self, ckpt, weight_dtype, vae_path, files)

    def denoiser_from_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype) -> nn.Module:
        """The diffusers transformer of a reference-layout file, its config read from the tensors' shapes (the
        family's `reference` module maps the layout)."""
        import importlib

        import diffusers
        from accelerate import init_empty_weights

        from trainers.models.component_files import fill_meta
        from trainers.models.reference_layout import prefix_of

        layout = importlib.import_module(f"trainers.models.{self.name}.reference")
        config = layout.config_from_shapes(layout.strip_prefix(ckpt.shapes), ckpt.path.name)
        with init_empty_weights():
            transformer = getattr(diffusers, self.transformer_class).from_config(config)
        nested = prefix_of(ckpt.shapes, layout.PREFIXES, layout.MARKER)  # read only the denoiser's tensors
        weights = layout.to_diffusers(layout.strip_prefix(ckpt.tensors(nested)), config, ckpt.path.name)
        return fill_meta(transformer, weights, weight_dtype, f"{self.title} transformer")

    def checkpoint_variant(self, config: Any) -> Any:
        """This family as the loaded transformer's config makes it (dev/schnell, SD3/SD3.5 sizes)."""
        return self

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        return last_blocks(denoiser.transformer_blocks, count, "blocks")

    def scheduler_config(self) -> dict[str, Any]:
        """The published sampling schedule (diffusers' FlowMatchEulerDiscreteScheduler config) of single files."""
        return {"shift": 3.0}

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = copy.copy(self)
        clone.settings = FlowSettings.from_values(values)
        return clone

    @property
    def t5_length(self) -> int:
        return self.settings.t5xxl_max_token_length or self.default_t5_length

    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        raise NotImplementedError("flow families write their single files with to_checkpoint")

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = [ConfigIssue(o.name, f"is not used with {self.title} models: leave it at {o.default!r}", o.group)
                  for o in FLOW_OPTIONS
                  if o.name not in self.own_options and values.get(o.name, o.default) != o.default]
        for name, group, refused, why in _REFUSED:
            if name in values and refused(values[name]):
                issues.append(ConfigIssue(name, f"{why} ({self.title} trains by flow matching)", group))
        issues += _size_issues(values, self.title) + self.network_arg_issues(values)
        if values.get("network_module", "networks.lora") != "networks.lora":
            issues.append(ConfigIssue("network_module", f"{self.title} LoRAs are trained with 'networks.lora' "
                                      "(sd-scripts' networks.lora_flux / networks.lora_sd3) only", "network"))
        block_args = [key for key in _BLOCK_ARGS if values.get(key) not in (None, "")]
        block_args += [a.split("=")[0].strip() for a in values.get("network_args", []) if
                       a.split("=")[0].strip() in _BLOCK_ARGS]
        issues += [ConfigIssue(key, f"is for the 3x3 convolutions of SD/SDXL UNets; {self.title} models have none"
                               if key.startswith("conv_") else f"is for the blocks of SD/SDXL UNets; {self.title} "
                               "models have other blocks", "network") for key in block_args]
        return issues

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """CLIP ids (B, 77) per CLIP tokenizer, then T5 ids (B, t5_length), padded and cut as sd-scripts does."""
        *clips, t5 = tokenizers
        out = [tok(captions, max_length=CLIP_LENGTH, padding="max_length", truncation=True,
                   return_tensors="pt").input_ids for tok in clips]
        t5_ids = t5(captions, max_length=self.t5_length, padding="max_length", truncation=True,
                    return_tensors="pt").input_ids
        for caption in self._t5_overlong(t5, captions):
            warnings.warn(PromptTruncated(f"a caption has more than {self.t5_length - 1} T5 tokens and is cut there "
                                          f"(t5xxl_max_token_length): {caption[:200]!r}"), stacklevel=2)
        return out + [t5_ids]

    def tokenize_weighted(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> Any:
        raise ValueError(f"weighted captions are not available for {self.title} models")

    def overlong(self, tokenizers: list[Any], captions: list[str], fmt: Any) -> list[str]:
        return self._t5_overlong(tokenizers[-1], captions)

    def _t5_overlong(self, t5: Any, captions: list[str]) -> list[str]:
        limit = self.t5_length - 1  # room for </s>
        return [c for c, ids in zip(captions, t5(captions, add_special_tokens=False).input_ids) if len(ids) > limit]

    def flow_metadata(self) -> dict[str, Any]:
        """sd-scripts' ss_* keys of the flow options this family reads."""
        return {f"ss_{name}": getattr(self.settings, name) for name in sorted(self.own_options)
                if name != "t5xxl_max_token_length"}


def last_blocks(blocks: nn.ModuleList, count: int, what: str) -> list[nn.Module]:
    """The last `count` of `blocks`; two at least stay on the device (sd-scripts' limit)."""
    if count > len(blocks) - 2:
        raise ValueError(f"this model has {len(blocks)} {what}: blocks_to_swap can keep at most {len(blocks) - 2} "
                         "of them in CPU memory")
    return list(blocks)[len(blocks) - count:] if count else []


def run_t5(t5: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """T5's last hidden states. T5 is never trained here (as sd-scripts by default): it runs in eval mode even inside
    a module in training mode (its dropout off, as sd-scripts keeps it), without autograd."""
    was_training = t5.training
    t5.eval()
    try:
        with torch.no_grad():
            return t5(ids, attention_mask=mask).last_hidden_state
    finally:
        t5.train(was_training)


def load_t5_tokenizer(folder: Path, subfolder: str) -> Any:
    """A model folder's T5 tokenizer; a tiny offline one when the folder has none (random-init benchmarks)."""
    from transformers import T5TokenizerFast

    if not (folder / subfolder).is_dir():
        import tempfile

        from trainers.models.tiny_flow import write_tiny_t5_tokenizer

        tmp = Path(tempfile.mkdtemp(prefix="atelier-t5-tokenizer-"))
        write_tiny_t5_tokenizer(tmp)
        return T5TokenizerFast.from_pretrained(tmp)
    return T5TokenizerFast.from_pretrained(folder, subfolder=subfolder)


def clip_attention_mask(ids: torch.Tensor) -> torch.Tensor:
    """1 up to and including each row's first EOS, 0 on the padding after it (as the tokenizer's own mask). CLIP's EOS
    has the highest id of its vocabulary (what transformers itself relies on for configs with a wrong eos_token_id)."""
    first_eos = ids.argmax(dim=1, keepdim=True)  # the first of equal maxima
    return (torch.arange(ids.shape[1], device=ids.device)[None, :] <= first_eos).long()


def t5_attention_mask(ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    return (ids != pad_token_id).long()


_BLOCK_ARGS = ("block_dims", "block_alphas", "conv_block_dims", "conv_block_alphas", "down_lr_weight", "mid_lr_weight",
               "up_lr_weight", "conv_dim", "conv_alpha")


def _on(value: Any) -> bool:
    return bool(value)


# (option, group, refused when, why): SD/SDXL options with no meaning for flow matching.
_REFUSED: tuple[tuple[str, str, Callable[[Any], bool], str], ...] = (
    ("v_parameterization", "model", _on, "v-prediction does not apply"),
    ("clip_skip", "model", lambda v: v != 1, "the text encoders' layers are fixed: set clip_skip = 1"),
    ("max_token_length", "dataset", lambda v: v not in (None, 75), "CLIP reads 77 tokens; the T5 encoder's length is "
     "t5xxl_max_token_length"),
    ("weighted_captions", "dataset", _on, "weighted captions are not available"),
    ("min_snr_gamma", "loss", lambda v: v not in (None, 0), "min-SNR weighting needs a noise schedule's SNR; "
     "weighting_scheme weights flow matching"),
    ("debiased_estimation_loss", "loss", _on, "debiased estimation needs a noise schedule's SNR"),
    ("scale_v_pred_loss_like_noise_pred", "loss", _on, "v-prediction does not apply"),
    ("v_pred_like_loss", "loss", _on, "v-prediction does not apply"),
    ("zero_terminal_snr", "loss", _on, "it rescales a DDPM noise schedule, which flow matching has not"),
    ("noise_offset", "loss", _on, "noise offset is not used (as in sd-scripts)"),
    ("multires_noise_iterations", "loss", _on, "multires noise is not used (as in sd-scripts)"),
    ("adaptive_noise_scale", "loss", lambda v: v is not None, "noise offset is not used (as in sd-scripts)"),
    ("train_text_encoder", "training", _on, "full finetunes train the transformer only here (sd-scripts' flux_train "
     "does too); LoRAs can train CLIP"),
    ("base_weights", "network", _on, "merging LoRAs into the base model is not available for it yet"),
    ("sdpa", "precision", lambda v: v is False, "the transformer's attention is always PyTorch's scaled-dot-product "
     "attention: set sdpa = true"),
)


SIZE_STEP = 16  # the VAE's 8 x the transformer's 2x2 patches (SD3) or packed tokens (FLUX)


def _size_issues(values: Mapping[str, Any], title: str) -> list[ConfigIssue]:
    issues = []
    sides = [p.strip() for p in str(values.get("resolution", "")).replace("x", ",").split(",")]
    if all(p.isdigit() for p in sides) and any(int(p) % SIZE_STEP for p in sides):
        issues.append(ConfigIssue("resolution", f"{title} models take sizes in multiples of {SIZE_STEP}: e.g. 512 or "
                                  "1024", "dataset"))
    if values.get("enable_bucket") and int(values.get("bucket_reso_steps") or 64) % SIZE_STEP:
        issues.append(ConfigIssue("bucket_reso_steps", f"must be a multiple of {SIZE_STEP} for {title} models "
                                  "(64 is safest)", "dataset"))
    return issues


def huber_schedule_issue(values: Mapping[str, Any], title: str) -> list[ConfigIssue]:
    if values.get("loss_type") in ("huber", "smooth_l1") and values.get("huber_schedule", "snr") == "snr":
        return [ConfigIssue("huber_schedule", f"'snr' needs a noise schedule's SNR, which {title} models have not "
                            "(as in sd-scripts): choose 'exponential' or 'constant'", "loss")]
    return []
