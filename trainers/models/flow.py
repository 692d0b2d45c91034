"""What the flow-matching families (SD3, FLUX) share: a run's settings and their text tokenization (their checks:
flow_rules.py).

Both read captions with CLIP tokenizers (77 tokens, one chunk) and a T5 tokenizer (t5xxl_max_token_length tokens),
as sd-scripts' strategies for them do; neither takes clip skip, max_token_length or weighted captions.
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.options.groups.flow import OPTIONS as FLOW_OPTIONS
from trainers.models.base import ModelFiles
from trainers.models.prompt_chunks import PromptTruncated

CLIP_LENGTH = 77
_DEFAULTS = {o.name: o.default for o in FLOW_OPTIONS}
T5_DTYPES = {"float32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}  # t5xxl_dtype's ('auto': none)
# Settings of how captions are encoded that sd-scripts does not write into the files it saves.
_NOT_IN_METADATA = ("t5xxl_max_token_length", "t5xxl_dtype")


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
    t5xxl_dtype: str = _DEFAULTS["t5xxl_dtype"]

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "FlowSettings":
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    @property
    def t5_dtype(self) -> torch.dtype | None:
        """The dtype T5-XXL runs in (t5xxl_dtype); None: the one it was loaded in, under the run's autocast."""
        return T5_DTYPES.get(self.t5xxl_dtype)


class FlowFamily:
    """Mixin of the flow families (after their FlowRules): settings per run and tokenization."""

    native_size = 1024
    settings: FlowSettings = FlowSettings()
    flow_target: str = "velocity"  # what the loss compares: the velocity (FLUX) or a latents estimate (SD3)
    title: str
    default_t5_length: int
    transformer_class: str  # its denoiser's diffusers class

    # --- single files in the reference layout (flow_checkpoint.py reads them; the family converts its denoiser) ---

    latent_scaling: tuple[float, float]  # the autoencoder's (scaling, shift) factors: in its config, not its file

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
        """sd-scripts' ss_* keys of the flow options this family reads that shape its training (FlowSettings)."""
        return {f"ss_{name}": getattr(self.settings, name) for name in sorted(self.own_options)
                if hasattr(self.settings, name) and name not in _NOT_IN_METADATA}


def last_blocks(blocks: nn.ModuleList, count: int, what: str) -> list[nn.Module]:
    """The last `count` of `blocks`; two at least stay on the device (sd-scripts' limit)."""
    if count > len(blocks) - 2:
        raise ValueError(f"this model has {len(blocks)} {what}: blocks_to_swap can keep at most {len(blocks) - 2} "
                         "of them in CPU memory")
    return list(blocks)[len(blocks) - count:] if count else []


def run_t5(t5: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None,
           dtype: torch.dtype | None = None) -> torch.Tensor:
    """T5's last hidden states. T5 is never trained here (as sd-scripts by default): it runs in eval mode even inside
    a module in training mode (its dropout off, as sd-scripts keeps it), without autograd.

    With `dtype` (t5xxl_dtype) T5's weights are cast to it when it first runs, and it runs in it outside the run's
    autocast: every caption, cached or not, and every sample prompt is encoded in that precision.
    """
    if dtype is not None and next(t5.parameters()).dtype != dtype:
        t5.to(dtype)
    own_precision = torch.autocast(ids.device.type, enabled=False) if dtype is not None else contextlib.nullcontext()
    was_training = t5.training
    t5.eval()
    try:
        with torch.no_grad(), own_precision:
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
