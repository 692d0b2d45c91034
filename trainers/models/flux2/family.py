"""FLUX.2 (diffusers Flux2Transformer2DModel): dev (Flux2Pipeline: a Mistral 3 text encoder, a guidance embedding) and
klein 4B/9B (Flux2KleinPipeline: a Qwen3 text encoder, no guidance embedding; base models sample with true CFG,
distilled ones without), as their pipelines run them and musubi-tuner trains them:

- captions in the text encoder's chat template (dev: with FLUX.2's system message), padded to 512 tokens, read by the
  language model; hidden layers (10, 20, 30) (dev) or (9, 18, 27) (klein) stacked along the features. The
  transformer has no text mask: it reads the padding's states too, as at inference.
- latents of the 32-channel autoencoder (AutoencoderKLFlux2), in 2x2 patches of 128 channels normalised by the
  autoencoder's batch-norm statistics; the training grid stays (B, 32, h, w) (the same normalisation per patch
  position), so masks and the noise-level draw see the VAE's grid. Position ids (t, h, w, l): (0, row, column, 0)
  for the image, (0, 0, 0, index) for the text. timestep = sigma, the velocity as output.
- with control images (a control folder named: trainers/models/edit.py), an edit LoRA as the pipelines take `image=`:
  each reference's latents packed after the noisy target's tokens with position ids (10 x its number, row, column,
  0), the transformer's output cut to the target's tokens (musubi-tuner's control-image training).

Its LoRA files use musubi-tuner's names (networks.lora_flux_2 on BFL's modules), which ComfyUI and diffusers'
Flux2LoraLoaderMixin read: `lora_unet_double_blocks_0_img_attn_qkv` (q, k and v as one module), `..._img_mlp_0`,
`lora_unet_single_blocks_0_linear1` (q, k, v and the MLP input: one layer in diffusers too), `..._linear2`.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelLoadError, SizeConditioning
from trainers.models.edit import ControlSlot, EditFamily
from trainers.models.flow import FlowFamily, TextEncoderSpec, run_frozen
from trainers.models.flow_latents import pack_latents, unpack_latents
from trainers.models.flow_sigmas import flux_resolution_shift
from trainers.models.flux.family import Flux
from trainers.models.flux2.rules import PIPELINES, Flux2Rules

TEXT_LENGTH = 512  # the pipelines' max_sequence_length, musubi-tuner's too
MARK = "\x00caption\x00"  # stands for the caption while a chat template is rendered
REFERENCE_SPACING = 10  # reference n's first position id is 10 x n (the pipelines' _prepare_image_ids scale)


class Flux2(EditFamily, Flux2Rules, FlowFamily, ModelFamily):
    implementation = "https://github.com/black-forest-labs/flux2"  # musubi-tuner's IMPL_FLUX_2
    transformer_class = "Flux2Transformer2DModel"
    vae_class = "AutoencoderKLFlux2"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw"}
    klein = False
    klein_size = "4b"  # klein's: "4b" or "9b"
    distilled = True  # dev and klein 4B/9B are; klein base models are not (they sample with true CFG)
    hidden_layers = (10, 20, 30)  # Flux2Pipeline's text_encoder_out_layers
    text_encoder_specs = (TextEncoderSpec("Mistral3ForConditionalGeneration", "text_encoder", "auto", "tokenizer",
                                          "Mistral 3", max_length=TEXT_LENGTH),)
    pad_token_id: int = 0  # its tokenizer's, set when loaded

    def variant(self, pipeline: str, distilled: bool) -> "Flux2":
        """dev, or klein (a Qwen3 text encoder; base or distilled) as its pipeline's class says."""
        if pipeline != PIPELINES[1]:
            return self
        clone = copy.copy(self)
        clone.klein, clone.distilled, clone.hidden_layers = True, distilled, (9, 18, 27)  # Flux2KleinPipeline's
        clone.pipeline_class = pipeline
        clone.text_encoder_specs = (TextEncoderSpec("Qwen3ForCausalLM", "text_encoder", "auto", "tokenizer", "Qwen3",
                                                    max_length=TEXT_LENGTH),)
        return clone

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
        family = self.variant(str(index.get("_class_name")), bool(index.get("is_distilled", False)))
        model = FlowFamily.load(family, folder, weight_dtype, vae_path, random_init)
        tokenizer = model.tokenizers[0]
        if not getattr(tokenizer, "chat_template", None):
            tokenizer.chat_template = processor_chat_template(folder / family.text_encoder_specs[0].tokenizer_subfolder)
        family = model.family.with_tokenizer(tokenizer)
        family.slot = ControlSlot()
        return replace(model, family=family)

    def checkpoint_variant(self, config: Any) -> "Flux2":
        """klein 9B (a 4096-wide transformer) or 4B, as musubi-tuner names them in its LoRAs' metadata."""
        if not self.klein:
            return self
        clone = copy.copy(self)
        clone.klein_size = "9b" if config.num_attention_heads * config.attention_head_dim >= 4096 else "4b"
        return clone

    def with_tokenizer(self, tokenizer: Any) -> "Flux2":
        """A copy whose prompt template is the tokenizer's chat template around a caption, as the pipeline renders
        it (dev: FLUX.2's system message, no generation prompt; klein: the generation prompt, thinking off)."""
        from dataclasses import replace

        if self.klein:
            messages = [{"role": "user", "content": MARK}]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 enable_thinking=False)
        else:
            from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

            messages = [{"role": "system", "content": [{"type": "text", "text": SYSTEM_MESSAGE}]},
                        {"role": "user", "content": [{"type": "text", "text": MARK}]}]
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        bos = tokenizer.bos_token
        if bos and text.startswith(bos) and tokenizer("x").input_ids[:1] == [tokenizer.bos_token_id]:
            text = text[len(bos):]  # the tokenizer adds it (the pipeline's rendered text has it once)
        clone = copy.copy(self)
        template = text.replace("{", "{{").replace("}", "}}").replace(MARK, "{}")
        clone.text_encoder_specs = (replace(self.text_encoder_specs[0], template=template),)
        clone.pad_token_id = tokenizer.pad_token_id
        return clone

    swap_blocks = Flux.swap_blocks  # the same double and single blocks, counted as sd-scripts counts FLUX.1's

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, None]:
        """(the language model's hidden layers `hidden_layers` stacked per token: (B, 512, 3 x D), None), as the
        pipelines encode; the padding is masked inside the encoder, its states kept (the transformer reads them)."""
        (encoder,), (ids,) = text_encoders, input_ids
        mask = (ids != self.pad_token_id).long()
        states = run_frozen(encoder, lambda: encoder.model(input_ids=ids, attention_mask=mask,
                                                           output_hidden_states=True, use_cache=False).hidden_states)
        return torch.cat([states[k] for k in self.hidden_layers], dim=-1), None

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                second: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, 32, h, w): each 2x2 patch one token of 128 channels, and back. The control
        images' tokens (edit training) follow the target's; their output is dropped."""
        batch, _, height, width = noisy.shape
        own = pack_latents(noisy)
        references = [pack_latents(latents.to(noisy.dtype)) for latents in self.references()]
        ids = [_image_ids(height // 2, width // 2, noisy.device)]
        ids += [_image_ids(latents.shape[-2] // 2, latents.shape[-1] // 2, noisy.device, REFERENCE_SPACING * number)
                for number, latents in enumerate(self.references(), start=1)]
        out = unet(hidden_states=torch.cat([own, *references], dim=1), encoder_hidden_states=hidden.to(noisy.dtype),
                   timestep=timesteps.to(noisy.dtype) / 1000, guidance=self.guidance(unet, batch, noisy.device),
                   img_ids=torch.cat(ids), txt_ids=_text_ids(hidden.shape[1], noisy.device), return_dict=False)[0]
        return unpack_latents(out[:, :own.shape[1]], height, width)

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """timestep_sampling 'flux2_shift' (musubi-tuner's): 'sigmoid', shifted by FLUX.1's rule (mu from 0.5 at 256
        to 1.15 at 4096 tokens) for the tokens FLUX.2 reads; the others as every family."""
        if self.settings.timestep_sampling != "flux2_shift":
            return super().draw_sigmas(normal, uniform, latent_size, min_timestep, max_timestep)
        height, width = latent_size
        logistic = torch.sigmoid(self.settings.sigmoid_scale * normal)
        return flux_resolution_shift(logistic, (height // 2) * (width // 2))

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = _patch_stats(vae, raw)
        return unpack_latents((pack_latents(raw) - mean) / std, raw.shape[-2], raw.shape[-1])

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        """FLUX.2's published sampling schedule (its diffusers scheduler config; the pipelines set mu)."""
        return {"shift": 3.0, "use_dynamic_shifting": True, "time_shift_type": "exponential"}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        import diffusers

        parts = {"scheduler": scheduler, "vae": model.vae, "text_encoder": model.text_encoders[0],
                 "tokenizer": model.tokenizers[0], "transformer": model.unet}
        if self.klein:
            return diffusers.Flux2KleinPipeline(**parts, is_distilled=self.distilled)
        return diffusers.Flux2Pipeline(**parts)

    def pipeline_embeds(self, hidden: torch.Tensor, second: torch.Tensor | None) -> dict[str, Any]:
        """dev's pipeline takes no negative prompt (its guidance is embedded); klein's does."""
        if self.klein:
            return {"prompt_embeds": hidden[:1], "negative_prompt_embeds": hidden[1:]}
        return {"prompt_embeds": hidden[:1]}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """Pixels of what the pipeline returns with output_type="latent": dev's normalised patch tokens, klein's
        autoencoder latents."""
        if latents.ndim == 3:
            scale = 2 * 2 ** (len(vae.config.block_out_channels) - 1)
            mean, std = _patch_stats(vae, latents)
            latents = unpack_latents(latents * std + mean, 2 * (height // scale), 2 * (width // scale))
        return vae.decode(latents.to(vae.device, vae.dtype)).sample

    def model_index(self) -> dict[str, Any]:
        """A saved folder's autoencoder class, and klein's is_distilled (its pipeline's config)."""
        return {"vae": ["diffusers", self.vae_class], **({"is_distilled": self.distilled} if self.klein else {})}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        version, architecture = self.musubi_architecture()
        return {**super().lora_metadata(v_prediction), "ss_base_model_version": version,
                "modelspec.architecture": f"{architecture}/lora", "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": "networks.lora_flux_2",
                **self.flow_metadata()}

    def musubi_architecture(self) -> tuple[str, str]:
        """musubi-tuner's (architecture_full, modelspec architecture) of this model: dev, klein 4B or klein 9B."""
        if not self.klein:
            return self.base_model_version, self.modelspec_architecture
        return f"flux_2_klein_{self.klein_size}", f"Flux.2-klein-{self.klein_size}"

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [*_double_block_targets(unet), *_single_block_targets(unet)]


def processor_chat_template(folder: Path) -> str:
    """The chat template a processor folder keeps beside its tokenizer (transformers' older chat_template.json), which
    the tokenizer alone does not read. Raises ModelLoadError when there is none: captions are encoded in it."""
    legacy = folder / "chat_template.json"
    template = json.loads(legacy.read_text(encoding="utf-8")).get("chat_template") if legacy.is_file() else None
    if not template:
        raise ModelLoadError(f"{folder} has no chat template (chat_template.jinja, or chat_template.json beside a "
                             "processor): FLUX.2 encodes captions in its text encoder's chat template, as its pipeline "
                             "does; give the model's diffusers folder with its tokenizer as published")
    return str(template)


def _patch_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The autoencoder's batch-norm mean and std of the 128 patch channels, shaped to broadcast over tokens."""
    mean = vae.bn.running_mean.to(like.device, like.dtype)
    std = torch.sqrt(vae.bn.running_var + vae.config.batch_norm_eps).to(like.device, like.dtype)
    return mean, std


def _image_ids(rows: int, cols: int, device: torch.device, time: int = 0) -> torch.Tensor:
    """(rows x cols, 4) position ids (t, h, w, l) = (time, row, column, 0), row by row."""
    ids = torch.zeros(rows, cols, 4, device=device, dtype=torch.long)
    ids[..., 0] = time
    ids[..., 1] = torch.arange(rows, device=device)[:, None]
    ids[..., 2] = torch.arange(cols, device=device)[None, :]
    return ids.reshape(rows * cols, 4)


def _text_ids(length: int, device: torch.device) -> torch.Tensor:
    """(length, 4) position ids (0, 0, 0, index) of the text tokens."""
    ids = torch.zeros(length, 4, device=device, dtype=torch.long)
    ids[:, 3] = torch.arange(length, device=device)
    return ids


def _double_block_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    """The double blocks' linear layers under BFL's names (musubi-tuner's lora_flux_2; no modulation in a block)."""
    for i, block in enumerate(unet.transformer_blocks):
        attn, prefix = block.attn, f"lora_unet_double_blocks_{i}_"
        for name, layers in (
                ("img_attn_qkv", (attn.to_q, attn.to_k, attn.to_v)),
                ("img_attn_proj", (attn.to_out[0],)),
                ("img_mlp_0", (block.ff.linear_in,)),
                ("img_mlp_2", (block.ff.linear_out,)),
                ("txt_attn_qkv", (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj)),
                ("txt_attn_proj", (attn.to_add_out,)),
                ("txt_mlp_0", (block.ff_context.linear_in,)),
                ("txt_mlp_2", (block.ff_context.linear_out,))):
            yield LoraTarget(prefix + name, layers)


def _single_block_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    for i, block in enumerate(unet.single_transformer_blocks):
        prefix = f"lora_unet_single_blocks_{i}_"
        yield LoraTarget(prefix + "linear1", (block.attn.to_qkv_mlp_proj,))
        yield LoraTarget(prefix + "linear2", (block.attn.to_out,))


FLUX2 = Flux2()
