"""HunyuanImage 2.1 (diffusers HunyuanImageTransformer2DModel, HunyuanImagePipeline), as sd-scripts'
hunyuan_image_train_network.py trains it: captions in the pipeline's template read by Qwen2.5-VL (its third-last
hidden states, less the template's 34 system tokens), the text in quotes of a caption (its glyph text) read by ByT5,
a transformer of dual- and single-stream blocks (FLUX.1's layout) over the unpatched 64-channel latents of its own
32x autoencoder (scaled by 0.75289), timestep = sigma x 1000, the velocity as output.

encode_prompts gives both encoders' states in one tensor: Qwen2.5-VL's tokens, then GLYPH_LENGTH ByT5 tokens, each
zero-padded to the wider of the two (the mask likewise), so that cached rows and the layer's one-tensor interface
hold both; denoise splits them again. Its LoRAs train every linear layer of the blocks under ComfyUI's names (the
reference's fused qkv and linear1: `lora_unet_double_blocks_0_img_attn_qkv`, `..._img_mlp_0`, `..._img_mod_lin`,
`lora_unet_single_blocks_0_modulation_lin`); sd-scripts' own names (`img_mlp_fc1`, `img_mod_linear`, ...) are read
too. diffusers' HunyuanImagePipeline has no LoRA loader: lora_for_pipeline's PEFT keys load with
`pipe.transformer.load_lora_adapter(state, prefix="transformer")` (what build_pipeline's load_lora_weights does).
"""
from __future__ import annotations

import copy
import dataclasses
import re
import types
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec
from trainers.models.flux.family import Flux, double_block_targets, single_block_targets
from trainers.models.hunyuan_image21.rules import HunyuanImage21Rules
from trainers.models.pipeline_lora import TransformerLoraLoading
from trainers.models.qwen_byt5 import byt5_ids, pipeline_embeds, qwen_byt5_states
from trainers.models.qwen_image.family import CHAT_TEMPLATE as QWEN_CHAT_TEMPLATE
from trainers.models.qwen_image.family import TEMPLATE_TOKENS, trimmed

# HunyuanImagePipeline's prompt_template_encode: Qwen-Image's without the assistant turn (nor the newline before it)
CHAT_TEMPLATE = QWEN_CHAT_TEMPLATE.removesuffix("\n<|im_start|>assistant\n")
TEXT_LENGTH = 1000  # its tokenizer_max_length (caption tokens after the template's system tokens)
GLYPH_LENGTH = 128  # its tokenizer_2_max_length (ByT5's bytes of the glyph text)
HIDDEN_LAYER = -3  # the hidden states it reads: hidden_state_skip_layer 2
# sd-scripts' names of the reference's layers -> ComfyUI's (its networks/convert_hunyuan_image_lora_to_comfy.py)
SD_SCRIPTS_NAMES = ((r"_(img|txt)_mlp_fc1\.", r"_\1_mlp_0."), (r"_(img|txt)_mlp_fc2\.", r"_\1_mlp_2."),
                    (r"_(img|txt)_mod_linear\.", r"_\1_mod_lin."), (r"_modulation_linear\.", "_modulation_lin."))
_QUOTED = (r"\'(.*?)\'", r"\"(.*?)\"", r"‘(.*?)’", r"“(.*?)”")


def glyph_text(caption: str) -> str | None:
    """The text a caption asks to be drawn (in quotes) as its ByT5 encoder reads it, None when there is none
    (HunyuanImagePipeline's extract_glyph_text)."""
    found = [text for pattern in _QUOTED for text in re.findall(pattern, caption)]
    return ". ".join(f'Text "{text}"' for text in found) + ". " if found else None


class HunyuanImage21(HunyuanImage21Rules, FlowFamily, ModelFamily):
    implementation = "https://github.com/Tencent-Hunyuan/HunyuanImage-2.1"
    native_size = 2048  # its pipeline's default_sample_size x the autoencoder's 32
    transformer_class = "HunyuanImageTransformer2DModel"
    vae_class = "AutoencoderKLHunyuanImage"
    default_t5_length = TEXT_LENGTH
    latent_scaling = (0.75289, 0.0)  # unused: its autoencoder's file is read with the published config's factor
    lora_network_module = "networks.lora_hunyuan_image"  # sd-scripts' (ss_network_module)
    text_encoder_specs = (
        TextEncoderSpec("Qwen2_5_VLForConditionalGeneration", "text_encoder", "auto", "tokenizer", "Qwen2.5-VL",
                        max_length=TEXT_LENGTH + TEMPLATE_TOKENS, template=CHAT_TEMPLATE),
        TextEncoderSpec("T5EncoderModel", "text_encoder_2", "auto", "tokenizer_2", "ByT5", max_length=GLYPH_LENGTH))
    pad_token_id: int = 0  # Qwen2.5-VL's tokenizer's, set when loaded
    guidance_distilled = False  # its distilled variant (a guidance embedding or MeanFlow): samples without CFG
    glyph_width: int = 0  # ByT5's d_model, set when loaded (the packed states' glyph channels)
    swap_blocks = Flux.swap_blocks  # sd-scripts' count: count // 2 double blocks and twice the rest single ones

    def load(self, folder: Any, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        return self._loaded(super().load(folder, weight_dtype, vae_path, random_init))

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: Any) -> Any:
        """ComfyUI's split files: the diffusion_models file (reference.py), text_encoder, byt5 and ae."""
        return self._loaded(super().load_checkpoint(ckpt, weight_dtype, vae_path, files))

    def _loaded(self, model: LoadedModel) -> LoadedModel:
        checkpoint_with_keywords(model.unet)
        family = copy.copy(model.family)  # knowing its tokenizer's pad token and ByT5's width
        family.pad_token_id = model.tokenizers[0].pad_token_id
        family.glyph_width = model.text_encoders[1].config.d_model
        return dataclasses.replace(model, family=family)

    def checkpoint_variant(self, config: Any) -> "HunyuanImage21":
        """The base model, or its distilled variant as the transformer's config tells it."""
        if not (config.guidance_embeds or config.use_meanflow):
            return self
        clone = copy.copy(self)
        clone.guidance_distilled = True
        return clone

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """Qwen2.5-VL's ids of each caption in the template, and ByT5's of its glyph text (all padding without one:
        the pipeline's zero states and mask)."""
        (qwen_ids,) = super().tokenize(tokenizers[:1], captions, fmt)
        return [qwen_ids, byt5_ids(tokenizers[1], [glyph_text(c) for c in captions], GLYPH_LENGTH)]

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Qwen2.5-VL's third-last hidden states after the template's system tokens, then ByT5's states of the
        glyph text, both zero on their padding and on the channels they lack; the mask of both), as
        HunyuanImagePipeline encodes. Qwen2.5-VL reads the batch's longest caption, not every padding token."""
        (qwen, byt5), (ids, glyph_ids) = text_encoders, input_ids

        def hidden_states(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return qwen.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[HIDDEN_LAYER]

        return qwen_byt5_states(qwen, hidden_states, byt5, ids, glyph_ids, self.pad_token_id, TEMPLATE_TOKENS)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w), each latent one token; each encoder's states cut after the batch's
        longest (the rest is padding the transformer masks); the distilled variant's guidance (x 1000, as its
        pipeline) and, for MeanFlow, the interval's end at the timestep itself (the instantaneous velocity)."""
        assert text_mask is not None, "HunyuanImage 2.1's encode_prompts gives the text mask"
        config = unet.config
        text, mask = trimmed(hidden[:, :-GLYPH_LENGTH, :config.text_embed_dim], text_mask[:, :-GLYPH_LENGTH])
        glyph, glyph_mask = trimmed(hidden[:, -GLYPH_LENGTH:], text_mask[:, -GLYPH_LENGTH:])
        extra: dict[str, Any] = {}
        if config.text_embed_2_dim is not None:
            extra = {"encoder_hidden_states_2": glyph[..., :config.text_embed_2_dim].to(noisy.dtype),
                     "encoder_attention_mask_2": glyph_mask.bool().to(noisy.device)}
        if (guidance := self.guidance(unet, noisy.shape[0], noisy.device)) is not None:
            extra["guidance"] = (guidance * 1000).to(noisy.dtype)
        if config.use_meanflow:
            extra["timestep_r"] = timesteps.to(noisy.dtype)
        return unet(hidden_states=noisy, timestep=timesteps.to(noisy.dtype), encoder_hidden_states=text.to(noisy.dtype),
                    encoder_attention_mask=mask.bool().to(noisy.device), return_dict=False, **extra)[0]

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        """HunyuanImage 2.1's sampling schedule: its pipeline's linear sigmas shifted by 5 (sd-scripts' flow_shift)."""
        return {"shift": 5.0}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        return _pipeline_class()(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                                 tokenizer=model.tokenizers[0], text_encoder_2=model.text_encoders[1],
                                 tokenizer_2=model.tokenizers[1], transformer=model.unet)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        """encode_prompts' (prompt, negative) rows as the pipeline's four embeddings and masks of each."""
        assert text_mask is not None, "HunyuanImage 2.1's encode_prompts gives the text mask"
        return pipeline_embeds(hidden, text_mask, GLYPH_LENGTH, self.glyph_width)

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        """Classifier-free guidance at the scale (the published folder's adaptive projected guider is not used); the
        distilled variant samples without it (as its pipeline does), its guidance embedding at guidance_scale."""
        if self.guidance_distilled:
            return {"guidance_scale": 1.0, "distilled_guidance_scale": self.settings.guidance_scale}
        return {"guidance_scale": cfg_scale}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": self.lora_network_module,
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """Every linear layer of the dual- and single-stream blocks under ComfyUI's names (as sd-scripts' LoRA
        trains them, modulations included)."""
        return [*double_block_targets(unet), *single_block_targets(unet)]

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        """sd-scripts' files (`img_mlp_fc1`, `img_mod_linear`, `modulation_linear`) in ComfyUI's names."""
        out = {}
        for key, value in state.items():
            for pattern, name in SD_SCRIPTS_NAMES:
                key = re.sub(pattern, name, key) if key.startswith("lora_unet_") else key
            out[key] = value
        return out


def checkpoint_with_keywords(transformer: nn.Module) -> None:
    """Make the transformer's enable_gradient_checkpointing work: diffusers 0.42.1's HunyuanImageTransformer2DModel
    calls its checkpointing function with keyword arguments (attention_mask, image_rotary_emb), which the default
    one (positional only) refuses; non-reentrant torch checkpointing passes them on (the instance's method: the
    saved model is unchanged)."""
    from torch.utils.checkpoint import checkpoint

    enable = transformer.enable_gradient_checkpointing

    def checkpointed(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(module.__call__, *args, use_reentrant=False, **kwargs)

    def enable_with_keywords(self: nn.Module, gradient_checkpointing_func: Any = None) -> None:
        enable(gradient_checkpointing_func or checkpointed)

    transformer.enable_gradient_checkpointing = types.MethodType(enable_with_keywords, transformer)


def _pipeline_class() -> type:
    """HunyuanImagePipeline taking a CFG scale (`guidance_scale`): its guider for the call, classifier-free guidance
    above 1, none otherwise (the pipeline's own guider choice needs a guider object per scale); and the LoRA calls
    Generate makes of a pipeline, which HunyuanImagePipeline lacks (no LoRA loader mixin in diffusers 0.42.1),
    through its transformer's PeftAdapterMixin."""
    from diffusers import HunyuanImagePipeline
    from diffusers.guiders import ClassifierFreeGuidance

    class ScaledHunyuanImagePipeline(TransformerLoraLoading, HunyuanImagePipeline):
        def __call__(self, *args: Any, guidance_scale: float = 1.0, **kwargs: Any) -> Any:
            self.guider = ClassifierFreeGuidance(guidance_scale=guidance_scale) if guidance_scale > 1 else None
            self.ocr_guider = None
            return super().__call__(*args, **kwargs)

    return ScaledHunyuanImagePipeline


HUNYUAN_IMAGE21 = HunyuanImage21()
