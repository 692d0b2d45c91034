"""The generic flow-matching layer: what every flow family (SD3, FLUX.1, Chroma, Z-Image, ...) shares, and the hooks
where families differ (their checks: flow_rules.py; docs/architecture.md says what a new family implements).

A family lists its text encoders (TextEncoderSpec: class, folder, tokenizer, length, prompt template), which this
layer loads and tokenizes; it turns their outputs into the conditioning (encode_prompts: hidden states and a second
tensor, the pooled output or the text's attention mask), feeds its transformer (denoise: latent packing, position ids,
guidance), draws its noise levels (draw_sigmas), scales its VAE's latents, and builds its diffusers pipeline.
Frozen text encoders always run in eval mode without autograd (run_frozen).
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.data.prompt_chunks import PromptTruncated
from trainers.models.base import ModelFiles, ModelLoadError
from trainers.models.flow_sigmas import FlowSettings, flux_sigmas, sd3_sigmas  # noqa: F401 (re-exported)

CLIP_LENGTH = 77
# Settings of how captions are encoded that sd-scripts does not write into the files it saves.
_NOT_IN_METADATA = ("text_encoder_max_tokens", "t5xxl_dtype")


@dataclass(frozen=True)
class TextEncoderSpec:
    """One text encoder of a flow family as its diffusers folder holds it, and how captions are tokenized for it."""

    encoder_class: str  # a transformers class name
    subfolder: str  # e.g. "text_encoder_2"
    tokenizer_kind: str  # "clip", "t5" or "auto" (transformers' AutoTokenizer): how its tokenizer loads
    tokenizer_subfolder: str
    what: str  # for messages, e.g. "T5-XXL"
    max_length: int | None = None  # tokens it reads; None: the family's text_length (e.g. text_encoder_max_tokens)
    template: str = "{}"  # the prompt it reads around the caption (e.g. a chat template)
    length_option: str = ""  # the option setting its length: a longer caption is cut with a warning naming it
    trainable: bool = False  # LoRA may train it (CLIP); the others stay frozen, in eval mode


class FlowFamily:
    """Mixin of the flow families (after their FlowRules): the hooks of the flow layer and their shared defaults."""

    native_size = 1024
    settings: FlowSettings = FlowSettings()
    fixed_settings: Mapping[str, Any] = {}  # settings the family always trains with (options it does not read)
    flow_target: str = "velocity"  # what the loss compares: the velocity (FLUX) or a latents estimate (SD3)
    title: str
    default_t5_length: int  # text_length when its length option is unset
    transformer_class: str  # its denoiser's diffusers class
    vae_class: str = "AutoencoderKL"  # its autoencoder's diffusers class
    text_encoder_specs: tuple[TextEncoderSpec, ...]  # in the order of LoadedModel.text_encoders

    # --- loading a diffusers folder ---

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        import diffusers
        import transformers
        from diffusers import FlowMatchEulerDiscreteScheduler

        from trainers.models.base import LoadedModel
        from trainers.models.components import load_component, load_vae
        from trainers.models.pending_encoders import load_text_encoder

        if missing := [s for s in self.text_encoder_specs if not (folder / s.subfolder).is_dir()]:
            names = ", ".join(f"{s.subfolder} ({s.what})" for s in missing)
            raise ModelLoadError(f"{folder} has no {names}: {self.title} is trained with its "
                                 f"{' and '.join(s.what for s in self.text_encoder_specs)} text encoders")
        transformer = load_component(getattr(diffusers, self.transformer_class), folder, "transformer", weight_dtype,
                                     random_init)
        vae = load_vae(folder, vae_path, random_init, self.vae_class)
        text_encoders = [load_text_encoder(getattr(transformers, s.encoder_class), folder, s.subfolder, weight_dtype,
                                           random_init) for s in self.text_encoder_specs]
        tokenizers = [load_spec_tokenizer(s, folder, random_init) for s in self.text_encoder_specs]
        scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(folder, subfolder="scheduler")
        family = self.checkpoint_variant(transformer.config)
        return LoadedModel(family, transformer, vae, text_encoders, tokenizers, scheduler, "flow", str(folder))

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

    def to_checkpoint(self, model: Any, denoiser_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Its single-file layout (families that read single files); the others save finetunes as folders."""
        raise NotImplementedError(f"{self.title} finetunes are saved as diffusers folders")

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
        clone.settings = replace(FlowSettings.from_values(values), **self.fixed_settings)
        return clone

    # --- text: tokens, encoders ---

    @property
    def t5_length(self) -> int:
        return self.settings.text_encoder_max_tokens or self.default_t5_length

    def text_length(self, spec: TextEncoderSpec) -> int:
        """The tokens `spec`'s encoder reads (its own, else the length option's or the family's default)."""
        return spec.max_length or self.t5_length

    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        raise NotImplementedError("flow families write their single files with to_checkpoint")

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """Ids (B, length) per text encoder, each caption in its prompt template, padded and cut as sd-scripts does;
        a caption cut by an encoder with a length option is named in a PromptTruncated warning."""
        out = []
        for spec, tok in zip(self.text_encoder_specs, tokenizers):
            out.append(tok([spec.template.format(c) for c in captions], max_length=self.text_length(spec),
                           padding="max_length", truncation=True, return_tensors="pt").input_ids)
            for caption in self._cut(spec, tok, captions):
                warnings.warn(PromptTruncated(
                    f"a caption has more than {self._room(spec, tok)} {spec.what} tokens and is cut there "
                    f"({spec.length_option}): {caption[:200]!r}"), stacklevel=2)
        return out

    def tokenize_weighted(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> Any:
        raise ValueError(f"weighted captions are not available for {self.title} models")

    def overlong(self, tokenizers: list[Any], captions: list[str], fmt: Any) -> list[str]:
        cut = {c for spec, tok in zip(self.text_encoder_specs, tokenizers) for c in self._cut(spec, tok, captions)}
        return [c for c in captions if c in cut]

    def _room(self, spec: TextEncoderSpec, tokenizer: Any) -> int:
        """The caption tokens `spec`'s encoder reads: its length less the template's and special tokens."""
        return self.text_length(spec) - len(tokenizer(spec.template.format("")).input_ids)

    def _cut(self, spec: TextEncoderSpec, tokenizer: Any, captions: list[str]) -> list[str]:
        if not spec.length_option:
            return []
        room = self._room(spec, tokenizer)
        return [c for c, ids in zip(captions, tokenizer(captions, add_special_tokens=False).input_ids)
                if len(ids) > room]

    # --- LoRA files ---

    def lora_for_pipeline(self, state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
        """A kohya file of its lora_targets (and trainable text encoders) as its pipeline's load_lora_weights takes
        it (a text encoder LoRAs do not train has no pipeline name)."""
        from trainers.models.flow_lora import kohya_to_diffusers

        names = tuple(spec.subfolder if spec.trainable else None for spec in self.text_encoder_specs)
        return kohya_to_diffusers(state, model, self.lora_targets(model.unet), names)

    def flow_metadata(self) -> dict[str, Any]:
        """sd-scripts' ss_* keys of the flow options this family reads that shape its training (FlowSettings)."""
        return {f"ss_{name}": getattr(self.settings, name) for name in sorted(self.own_options)
                if hasattr(self.settings, name) and name not in _NOT_IN_METADATA}

    # --- training ---

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """Noise levels (B,) in [0, 1] from one normal and one uniform draw per sample: sd-scripts' timestep_sampling
        (FLUX.1's, also Chroma's and musubi-tuner's); SD3 draws by weighting_scheme and training_shift instead."""
        if self.flow_target == "latents":
            return sd3_sigmas(self.settings, normal, uniform, min_timestep, max_timestep)
        return flux_sigmas(self.settings, normal, uniform, latent_size)

    def shaped_noise(self, noise: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
        """The noise (B, ...) as the noisy input at noise levels `sigmas` (B,) takes it: as drawn (a family scaling or
        clipping its noise, HiDream-O1-Image, says otherwise)."""
        return noise

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        """The VAE's latents as the transformer reads them: shifted and scaled as the VAE's config says."""
        shift = getattr(vae.config, "shift_factor", None) or 0.0
        return (raw - shift) * vae.config.scaling_factor

    # The diffusers ControlNet of its transformer that trainers/methods/controlnet builds with its from_transformer
    # and feeds control_tokens; empty: no ControlNet is trained for the family.
    controlnet_class: str = ""

    def control_tokens(self, vae: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """Control images (B, 3, H, W) in [0, 1] as its controlnet_class reads them (its diffusers pipeline's way)."""
        raise NotImplementedError(f"{self.title} has no ControlNet")

    def guidance(self, unet: nn.Module, batch: int, device: torch.device) -> torch.Tensor | None:
        """The guidance embedding's input (guidance_scale per sample) of guidance-distilled transformers; else None."""
        if not getattr(unet.config, "guidance_embeds", False):
            return None
        return torch.full((batch,), float(self.settings.guidance_scale), device=device)

    # --- samples ---

    def inference_scheduler(self, model: Any, sampler: str) -> Any:
        return type(model.noise_scheduler).from_config(model.noise_scheduler.config)

    def latent_grid(self, latents: torch.Tensor, vae: nn.Module, width: int, height: int) -> torch.Tensor:
        """The latents a pipeline returns (output_type="latent") as the VAE's grid (B, C, h, w) (packed families
        unpack their tokens)."""
        return latents

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        grid = self.latent_grid(latents, vae, width, height).to(vae.device, vae.dtype)
        shift = getattr(vae.config, "shift_factor", None) or 0.0
        return vae.decode(grid / vae.config.scaling_factor + shift).sample


def load_spec_tokenizer(spec: TextEncoderSpec, folder: Path, random_init: bool) -> Any:
    """A text encoder's tokenizer from a model folder."""
    from trainers.models.components import load_tokenizer

    if spec.tokenizer_kind == "clip":
        return load_tokenizer(folder, spec.tokenizer_subfolder, random_init)
    if spec.tokenizer_kind == "t5":
        return load_t5_tokenizer(folder, spec.tokenizer_subfolder)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, subfolder=spec.tokenizer_subfolder)


@contextlib.contextmanager
def frozen(encoder: nn.Module) -> Iterator[None]:
    """`encoder` in eval mode (its dropout off) without autograd, even inside a module in training mode; its mode
    given back afterwards."""
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        encoder.train(was_training)


def run_frozen(encoder: nn.Module, call: Callable[[], Any]) -> Any:
    """`call()` (which runs `encoder`) with the encoder frozen."""
    with frozen(encoder):
        return call()


def last_blocks(blocks: nn.ModuleList, count: int, what: str) -> list[nn.Module]:
    """The last `count` of `blocks`; two at least stay on the device (sd-scripts' limit)."""
    if count > len(blocks) - 2:
        raise ValueError(f"this model has {len(blocks)} {what}: blocks_to_swap can keep at most {len(blocks) - 2} "
                         "of them in CPU memory")
    return list(blocks)[len(blocks) - count:] if count else []


def run_t5(t5: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None,
           dtype: torch.dtype | None = None) -> torch.Tensor:
    """T5's last hidden states. T5 is never trained here (as sd-scripts by default): it runs frozen (run_frozen).

    With `dtype` (t5xxl_dtype) T5's weights are cast to it when it first runs, and it runs in it outside the run's
    autocast: every caption, cached or not, and every sample prompt is encoded in that precision.
    """
    if dtype is not None and next(t5.parameters()).dtype != dtype:
        t5.to(dtype)
    own_precision = torch.autocast(ids.device.type, enabled=False) if dtype is not None else contextlib.nullcontext()
    with own_precision:
        return run_frozen(t5, lambda: t5(ids, attention_mask=mask).last_hidden_state)


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
