"""FLUX.1 (dev, schnell): CLIP-L (pooled) and T5-XXL text encoders, a flow-matching transformer over 2x2-packed latent
tokens, a guidance embedding (dev). Loaded from diffusers folders (FluxPipeline) or, as sd-scripts takes it, from the
reference-layout transformer file (flux1-dev.safetensors) with the clip_l, t5xxl and ae files (reference.py maps
it); kohya names its LoRA modules after the reference implementation (double_blocks/single_blocks, fused qkv), which
trainers/models/flow_lora.py maps.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import CLIP_LENGTH, FlowFamily, TextEncoderSpec, last_blocks, run_t5, t5_attention_mask
from trainers.models.flow_latents import image_ids, pack_latents, packed_grid, unpack_latents  # noqa: F401 - FLUX's packing
from trainers.models.flux import lora_layers
from trainers.models.flux.rules import FluxRules

SAMPLE_GUIDANCE = 3.5  # the guidance embedding's value for samples (sd-scripts' --g default; FluxPipeline's too)


class Flux(FluxRules, FlowFamily, ModelFamily):
    base_model_version = "flux1"  # sd-scripts' MODEL_VERSION_FLUX_V1
    modelspec_architecture = "flux-1-dev"
    implementation = "https://github.com/black-forest-labs/flux"
    transformer_class = "FluxTransformer2DModel"
    default_t5_length = 512
    schnell = False
    latent_scaling = (0.3611, 0.1159)  # the ae's (its diffusers config's; not in the ae file)
    text_encoder_specs = (
        TextEncoderSpec("CLIPTextModel", "text_encoder", "clip", "tokenizer", "CLIP-L", max_length=CLIP_LENGTH,
                        trainable=True),
        TextEncoderSpec("T5EncoderModel", "text_encoder_2", "t5", "tokenizer_2", "T5-XXL",
                        length_option="text_encoder_max_tokens"))

    def variant(self, guidance_embeds: bool) -> "Flux":
        """dev (guidance-distilled: a guidance embedding) or schnell (none)."""
        if guidance_embeds:
            return self
        clone = copy.copy(self)
        clone.schnell, clone.default_t5_length, clone.modelspec_architecture = True, 256, "flux-1-schnell"
        return clone

    # --- the reference layout (flux1-dev.safetensors with clip_l, t5xxl and ae files) ---

    def checkpoint_variant(self, config: Any) -> "Flux":
        return self.variant(bool(config.guidance_embeds))

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """flux1-dev.safetensors' layout (the transformer alone, as sd-scripts' flux_train.py saves it); a family
        built on FLUX.1's (Chroma) in its own `reference` module's."""
        import importlib

        from accelerate.utils import extract_model_from_parallel

        reference = importlib.import_module(f"trainers.models.{self.name}.reference")
        return reference.to_reference(denoiser_state, extract_model_from_parallel(model.unet).config)

    def scheduler_config(self) -> dict[str, Any]:
        """The published FLUX.1 dev / schnell sampling schedules (their diffusers scheduler configs)."""
        if self.schnell:
            return {"shift": 1.0, "use_dynamic_shifting": False}
        return {"shift": 3.0, "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 1.15,
                "base_image_seq_len": 256, "max_image_seq_len": 4096}

    def lora_target_dims(self, targets: list[LoraTarget], args: Mapping[str, str], dim: int) -> dict[str, int] | None:
        blocks = {"double": _count_blocks(targets, "double"), "single": _count_blocks(targets, "single")}
        return lora_layers.layer_dims([t.name for t in targets], args, dim, blocks)

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        """sd-scripts' count: count // 2 double blocks and twice the rest in single blocks."""
        double = count // 2
        return (last_blocks(denoiser.transformer_blocks, double, "double blocks")
                + last_blocks(denoiser.single_transformer_blocks, (count - double) * 2, "single blocks"))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(T5 hidden states, CLIP-L pooled output); with apply_t5_attn_mask T5 reads no padding and the padding's
        states are zero, which is how the transformer's attention mask is found again (also from cached outputs)."""
        clip, t5 = text_encoders
        clip_ids, t5_ids = input_ids
        pooled = clip(clip_ids).pooler_output
        if not self.settings.apply_t5_attn_mask:
            return run_t5(t5, t5_ids, None), pooled
        mask = t5_attention_mask(t5_ids, t5.config.pad_token_id)
        hidden = run_t5(t5, t5_ids, mask)
        return hidden * mask[..., None].to(hidden.dtype), pooled

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): packed into (h/2 x w/2) tokens of C x 4, and back. Reference
        tokens (FLUX.1 Kontext's control images) follow the latents' in the sequence; their output is dropped."""
        batch, _, height, width = noisy.shape
        own = pack_latents(noisy)
        ids = image_ids(height // 2, width // 2, noisy.device, noisy.dtype)
        references, reference_ids = self.reference_tokens(noisy)
        tokens, ids = torch.cat([own, references], dim=1), torch.cat([ids, reference_ids])
        guidance = self.guidance(unet, batch, noisy.device)
        kwargs: dict[str, Any] = {}
        if self.settings.apply_t5_attn_mask:
            kwargs["joint_attention_kwargs"] = {"attention_mask": joint_attention_mask(hidden, tokens.shape[1])}
        out = unet(hidden_states=tokens, timestep=timesteps.to(noisy.dtype) / 1000, guidance=guidance,
                   pooled_projections=pooled.to(noisy.dtype), encoder_hidden_states=hidden.to(noisy.dtype),
                   txt_ids=torch.zeros(hidden.shape[1], 3, device=noisy.device, dtype=noisy.dtype),
                   img_ids=ids, return_dict=False)[0]
        return unpack_latents(out[:, :own.shape[1]], height, width)

    def reference_tokens(self, noisy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed tokens (B, n, C x 4) and their position ids (n, 3) that join the latents' (none for FLUX.1)."""
        return noisy.new_zeros(noisy.shape[0], 0, noisy.shape[1] * 4), noisy.new_zeros(0, 3)

    controlnet_class = "FluxControlNetModel"

    def control_tokens(self, vae: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
        """The VAE's latents (its mode) of the control images, scaled and packed as the latents are: what
        FluxControlNetPipeline gives a ControlNet without a hint block (diffusers' from_transformer makes those)."""
        with torch.no_grad():
            raw = vae.encode((pixels * 2 - 1).to(vae.device, vae.dtype)).latent_dist.mode()
        return pack_latents(self.vae_latents(raw, vae))

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        """Its pipeline_class (FluxPipeline; FluxKontextPipeline for Kontext) over the model's modules."""
        import diffusers

        clip, t5 = model.text_encoders
        if self.settings.apply_t5_attn_mask:
            mask_padding_in_attention(model.unet)
        pipeline = getattr(diffusers, self.pipeline_class)
        return pipeline(scheduler=scheduler, vae=model.vae, text_encoder=clip, tokenizer=model.tokenizers[0],
                        text_encoder_2=t5, tokenizer_2=model.tokenizers[1], transformer=model.unet)

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"true_cfg_scale": cfg_scale, "guidance_scale": SAMPLE_GUIDANCE}

    def latent_grid(self, latents: torch.Tensor, vae: nn.Module, width: int, height: int) -> torch.Tensor:
        return packed_grid(latents, 2 ** (len(vae.config.block_out_channels) - 1), width, height)

    # --- saving and describing ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": "networks.lora_flux",
                "ss_model_type": "flux", **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """The blocks' layers, then the input layers (trained with in_dims only)."""
        return [*double_block_targets(unet), *single_block_targets(unet), *_input_targets(unet)]



def _count_blocks(targets: list[LoraTarget], kind: str) -> int:
    prefix = f"lora_unet_{kind}_blocks_"
    return len({t.name[len(prefix):].split("_")[0] for t in targets if t.name.startswith(prefix)})


def double_block_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    """The double blocks' layers under the reference's names (their modulations where the blocks have their own:
    Chroma's come from its distilled guidance layer)."""
    for i, block in enumerate(unet.transformer_blocks):
        attn, prefix = block.attn, f"lora_unet_double_blocks_{i}_"
        for name, layers in (
                ("img_mod_lin", _linear(block.norm1)),
                ("img_attn_qkv", (attn.to_q, attn.to_k, attn.to_v)),
                ("img_attn_proj", (attn.to_out[0],)),
                ("img_mlp_0", (block.ff.net[0].proj,)),
                ("img_mlp_2", (block.ff.net[2],)),
                ("txt_mod_lin", _linear(block.norm1_context)),
                ("txt_attn_qkv", (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj)),
                ("txt_attn_proj", (attn.to_add_out,)),
                ("txt_mlp_0", (block.ff_context.net[0].proj,)),
                ("txt_mlp_2", (block.ff_context.net[2],))):
            if layers:
                yield LoraTarget(prefix + name, layers)


def single_block_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    for i, block in enumerate(unet.single_transformer_blocks):
        attn, prefix = block.attn, f"lora_unet_single_blocks_{i}_"
        # The reference's linear1 computes q, k, v and the MLP input in one layer, in that order.
        yield LoraTarget(prefix + "linear1", (attn.to_q, attn.to_k, attn.to_v, block.proj_mlp))
        yield LoraTarget(prefix + "linear2", (block.proj_out,))
        if modulation := _linear(block.norm):
            yield LoraTarget(prefix + "modulation_lin", modulation)


def _linear(norm: nn.Module) -> tuple[nn.Linear, ...]:
    """An adaptive norm's modulation layer (none in a pruned norm)."""
    linear = getattr(norm, "linear", None)
    return (linear,) if linear is not None else ()


def _input_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    """The input layers under the reference's names (img_in, time_in, vector_in, guidance_in, txt_in)."""
    embed = unet.time_text_embed
    yield LoraTarget("lora_unet_img_in", (unet.x_embedder,))
    for name, mlp in (("time_in", embed.timestep_embedder), ("vector_in", embed.text_embedder),
                      ("guidance_in", getattr(embed, "guidance_embedder", None))):  # schnell has no guidance
        if mlp is not None:
            yield LoraTarget(f"lora_unet_{name}_in_layer", (mlp.linear_1,))
            yield LoraTarget(f"lora_unet_{name}_out_layer", (mlp.linear_2,))
    yield LoraTarget("lora_unet_txt_in", (unet.context_embedder,))


def joint_attention_mask(hidden: torch.Tensor, image_tokens: int) -> torch.Tensor:
    """(B, 1, 1, text + image tokens): every image token and the text tokens that are not zeroed padding."""
    text = hidden.abs().amax(dim=-1) > 0
    image = torch.ones(hidden.shape[0], image_tokens, dtype=torch.bool, device=hidden.device)
    return torch.cat([text, image], dim=1)[:, None, None, :]


def mask_padding_in_attention(transformer: nn.Module) -> None:
    """Make the transformer mask zeroed text tokens in every call that does not pass a mask (the pipeline's)."""
    if getattr(transformer, "_atelier_masks_padding", False):
        return

    def add_mask(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        joint = dict(kwargs.get("joint_attention_kwargs") or {})
        if "attention_mask" not in joint and kwargs.get("encoder_hidden_states") is not None:
            joint["attention_mask"] = joint_attention_mask(kwargs["encoder_hidden_states"],
                                                           kwargs["hidden_states"].shape[1])
            kwargs = {**kwargs, "joint_attention_kwargs": joint}
        return args, kwargs

    transformer.register_forward_pre_hook(add_mask, with_kwargs=True)
    transformer._atelier_masks_padding = True


FLUX = Flux()
