"""SD3 and SD3.5 (medium, large): CLIP-L and CLIP-G (pooled outputs joined) and T5-XXL text encoders and an MMDiT
transformer trained by flow matching, as sd-scripts' sd3_train_network.py does. Loaded from diffusers folders
(StableDiffusion3Pipeline) or, as sd-scripts takes it, from Stability's single file (sd3.5_large.safetensors) with
the clip_l, clip_g and t5xxl files it may lack (reference.py maps it); kohya names its LoRA modules after the
reference MMDiT (joint_blocks, fused qkv).
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import (
    CLIP_LENGTH,
    FlowFamily,
    TextEncoderSpec,
    clip_attention_mask,
    run_t5,
    t5_attention_mask,
)
from trainers.models.sd3.rules import StableDiffusion3Rules


class StableDiffusion3(StableDiffusion3Rules, FlowFamily, ModelFamily):
    base_model_version = "5-medium"  # sd-scripts writes the MMDiT's type: medium, 5-medium or 5-large
    modelspec_architecture = "stable-diffusion-3-5-medium"
    implementation = "https://github.com/Stability-AI/sd3.5"
    transformer_class = "SD3Transformer2DModel"
    default_t5_length = 256
    flow_target = "latents"
    latent_scaling = (1.5305, 0.0609)  # its VAE's (the diffusers config's; not in the file)
    text_encoder_specs = (
        TextEncoderSpec("CLIPTextModelWithProjection", "text_encoder", "clip", "tokenizer", "CLIP-L",
                        max_length=CLIP_LENGTH, trainable=True),
        TextEncoderSpec("CLIPTextModelWithProjection", "text_encoder_2", "clip", "tokenizer_2", "CLIP-G",
                        max_length=CLIP_LENGTH, trainable=True),
        TextEncoderSpec("T5EncoderModel", "text_encoder_3", "t5", "tokenizer_3", "T5-XXL",
                        length_option="text_encoder_max_tokens"))

    def variant(self, config: Any) -> "StableDiffusion3":
        """sd-scripts' model type: 'medium' (SD3), '5-medium' (extra self-attention blocks) or '5-large'."""
        kind = "medium" if not config.qk_norm else ("5-medium" if config.dual_attention_layers else "5-large")
        clone = copy.copy(self)
        clone.base_model_version, clone.modelspec_architecture = kind, f"stable-diffusion-3-{kind}"
        clone.title = "SD3" if kind == "medium" else "SD3.5"
        return clone

    # --- the reference layout (Stability's single files) ---

    def checkpoint_variant(self, config: Any) -> "StableDiffusion3":
        return self.variant(config)

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Stability's layout: the MMDiT (model.diffusion_model.*) and the VAE (first_stage_model.*), as sd-scripts'
        sd3_train.py saves them (text encoders are not trained in a finetune; clip_l, clip_g, t5xxl name them)."""
        from accelerate.utils import extract_model_from_parallel

        from trainers.models.convert import vae_to_ldm
        from trainers.models.sd3 import reference

        mmdit = reference.to_reference(denoiser_state, extract_model_from_parallel(model.unet).config)
        vae = extract_model_from_parallel(model.vae)
        return {**{"model.diffusion_model." + k: v for k, v in mmdit.items()},
                **vae_to_ldm(vae.state_dict(), vae.config)}

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(CLIP-L and CLIP-G penultimate states side by side, padded to T5's width, then T5's states; the two CLIP
        pooled projections side by side), as sd-scripts and diffusers' pipeline join them."""
        clip_l, clip_g, t5 = text_encoders
        l_ids, g_ids, t5_ids = input_ids
        hidden, pooled = [], []
        for encoder, ids in ((clip_l, l_ids), (clip_g, g_ids)):
            mask = clip_attention_mask(ids) if self.settings.apply_lg_attn_mask else None
            out = encoder(ids, attention_mask=mask, output_hidden_states=True)
            hidden.append(out.hidden_states[-2])
            pooled.append(out.text_embeds)
        t5_mask = t5_attention_mask(t5_ids, t5.config.pad_token_id) if self.settings.apply_t5_attn_mask else None
        t5_hidden = run_t5(t5, t5_ids, t5_mask, self.settings.t5_dtype)
        clip_hidden = torch.cat(hidden, dim=-1).to(t5_hidden.dtype)
        clip_hidden = nn.functional.pad(clip_hidden, (0, t5_hidden.shape[-1] - clip_hidden.shape[-1]))
        return torch.cat([clip_hidden, t5_hidden], dim=-2), torch.cat(pooled, dim=-1)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        return unet(hidden_states=noisy, timestep=timesteps, encoder_hidden_states=hidden.to(noisy.dtype),
                    pooled_projections=pooled.to(noisy.dtype), return_dict=False)[0]

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import StableDiffusion3Pipeline

        (clip_l, clip_g, t5), (tok_l, tok_g, tok_t5) = model.text_encoders, model.tokenizers
        return StableDiffusion3Pipeline(transformer=model.unet, scheduler=scheduler, vae=model.vae, text_encoder=clip_l,
                                        tokenizer=tok_l, text_encoder_2=clip_g, tokenizer_2=tok_g, text_encoder_3=t5,
                                        tokenizer_3=tok_t5)

    # --- saving and describing ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": "diffusers",
                "ss_network_module": "networks.lora_sd3", **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [target for i, block in enumerate(unet.transformer_blocks) for target in _block_targets(i, block)]



def _block_targets(index: int, block: nn.Module) -> Iterator[LoraTarget]:
    """A joint block's modules under the reference MMDiT's names (context_block and x_block)."""
    prefix, attn = f"lora_unet_joint_blocks_{index}_", block.attn
    context = prefix + "context_block_"
    if block.context_pre_only:
        # The last block's context modulation is (shift, scale) in the reference and (scale, shift) in diffusers.
        width = block.norm1_context.linear.out_features // 2
        order = torch.cat([torch.arange(width, 2 * width), torch.arange(width)])
        yield LoraTarget(context + "adaLN_modulation_1", (block.norm1_context.linear,), (order,))
    else:
        yield LoraTarget(context + "adaLN_modulation_1", (block.norm1_context.linear,))
    yield LoraTarget(context + "attn_qkv", (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj))
    if not block.context_pre_only:
        yield LoraTarget(context + "attn_proj", (attn.to_add_out,))
        yield LoraTarget(context + "mlp_fc1", (block.ff_context.net[0].proj,))
        yield LoraTarget(context + "mlp_fc2", (block.ff_context.net[2],))
    x = prefix + "x_block_"
    yield LoraTarget(x + "adaLN_modulation_1", (block.norm1.linear,))
    yield LoraTarget(x + "attn_qkv", (attn.to_q, attn.to_k, attn.to_v))
    yield LoraTarget(x + "attn_proj", (attn.to_out[0],))
    if block.attn2 is not None:
        yield LoraTarget(x + "attn2_qkv", (block.attn2.to_q, block.attn2.to_k, block.attn2.to_v))
        yield LoraTarget(x + "attn2_proj", (block.attn2.to_out[0],))
    yield LoraTarget(x + "mlp_fc1", (block.ff.net[0].proj,))
    yield LoraTarget(x + "mlp_fc2", (block.ff.net[2],))


SD3 = StableDiffusion3()
