"""Anima's denoiser: Cosmos-Predict2's MiniTrainDIT (diffusers' CosmosTransformer3DModel: the same layout, checked
against sd-scripts' library/anima_models.py) with its LLM adapter (diffusers' AnimaTextConditioner, the
`llm_adapter.*` tensors of the published file) inside, as sd-scripts and ComfyUI run it: the adapter turns Qwen3's
hidden states and the caption's T5 token ids into the cross-attention context at every call, so a finetune trains
it and a LoRA may.

The published model concatenates a padding-mask channel (zeros for whole images) to the latents before its patch
embedding. diffusers resizes that mask with torchvision, which is not a dependency here: the model is built with
the mask as a 17th input channel (`in_channels = 17`, `concat_padding_mask = False`) and the zeros are given as the
condition mask, which diffusers concatenates the same way.
"""
from __future__ import annotations

import torch
from diffusers import AnimaTextConditioner, CosmosTransformer3DModel
from diffusers.configuration_utils import register_to_config

LATENT_CHANNELS = 16
QK_NORM_EPS = 1e-6  # the reference's RMSNorm of q and k (diffusers' Attention defaults to 1e-5)


class AnimaTransformer(CosmosTransformer3DModel):
    """CosmosTransformer3DModel with Anima's LLM adapter as `llm_adapter` (its defaults: the published 2B model)."""

    @register_to_config
    def __init__(self, in_channels: int = LATENT_CHANNELS + 1, out_channels: int = LATENT_CHANNELS,
                 num_attention_heads: int = 16, attention_head_dim: int = 128, num_layers: int = 28,
                 mlp_ratio: float = 4.0, text_embed_dim: int = 1024, adaln_lora_dim: int = 256,
                 max_size: tuple[int, int, int] = (128, 512, 512), patch_size: tuple[int, int, int] = (1, 2, 2),
                 rope_scale: tuple[float, float, float] = (1.0, 4.0, 4.0), adapter_source_dim: int = 1024,
                 adapter_model_dim: int = 1024, adapter_layers: int = 6, adapter_heads: int = 16,
                 adapter_vocab_size: int = 32128) -> None:
        super().__init__(in_channels=in_channels, out_channels=out_channels, num_attention_heads=num_attention_heads,
                         attention_head_dim=attention_head_dim, num_layers=num_layers, mlp_ratio=mlp_ratio,
                         text_embed_dim=text_embed_dim, adaln_lora_dim=adaln_lora_dim, max_size=max_size,
                         patch_size=patch_size, rope_scale=rope_scale, concat_padding_mask=False,
                         extra_pos_embed_type=None)
        self.llm_adapter = AnimaTextConditioner(
            source_dim=adapter_source_dim, target_dim=text_embed_dim, model_dim=adapter_model_dim,
            num_layers=adapter_layers, num_attention_heads=adapter_heads, target_vocab_size=adapter_vocab_size)
        for block in self.transformer_blocks:
            for attention in (block.attn1, block.attn2):
                attention.norm_q.eps = attention.norm_k.eps = QK_NORM_EPS

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                text_mask: torch.Tensor | None = None, t5_ids: torch.Tensor | None = None,
                t5_mask: torch.Tensor | None = None, return_dict: bool = False, **kwargs: object) -> tuple[torch.Tensor]:
        """Latents (B, 16, T, h, w) at `timestep` (B,) = sigma in [0, 1], conditioned on Qwen3's states (B, L, 1024)
        with their mask and the caption's T5 ids (B, L5) with theirs: the velocity, in the latents' shape."""
        assert t5_ids is not None, "Anima's adapter reads the caption's T5 token ids"
        context = self.llm_adapter(encoder_hidden_states, t5_ids, target_attention_mask=t5_mask,
                                   source_attention_mask=text_mask)
        b, _, frames, height, width = hidden_states.shape
        padding = hidden_states.new_zeros(b, 1, frames, height, width)
        return super().forward(hidden_states, timestep, context.to(hidden_states.dtype), condition_mask=padding,
                               return_dict=False)
