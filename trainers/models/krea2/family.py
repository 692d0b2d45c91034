"""Krea 2 (diffusers Krea2Transformer2DModel, Krea2Pipeline), trained as Qwen-Image is where the two agree (its
autoencoder, one frame, latents normalised by its per-channel mean and std; 2x2-packed latent tokens; timestep =
sigma, the velocity as output, no guidance embedding) and as Krea2Pipeline runs it where they differ: the caption after
Qwen-Image's system prefix, padded to a fixed length, then the assistant suffix (padding in the middle), read by
Qwen3-VL with positions that count only real tokens; the hidden layers `text_encoder_select_layers` stacked per token
(the transformer's text-fusion stage mixes them), less the prefix's 34 tokens, with the text mask. 'krea2_shift'
(musubi-tuner's) shifts the noise level by the image's size as the pipeline samples (mu 0.5 at 256 to 1.15 at 6400
tokens). Its LoRAs train musubi-tuner's modules (networks.lora_krea2: every Linear of the reference model,
`lora_unet_blocks_0_attn_wq`, `..._mlp_gate`, `lora_unet_txtfusion_projector`, `lora_unet_first`); the files name them
as diffusers' load_lora_weights and ComfyUI both read them (`diffusion_model.blocks.0.attn.wq.lora_A.weight`, the alpha
folded in).
"""
from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, run_frozen
from trainers.models.flow_latents import pack_latents, unpack_latents
from trainers.models.flow_sigmas import shifted
from trainers.models.krea2.rules import Krea2Rules
from trainers.models.lora_file_names import FileNamedLora, path_target
from trainers.models.qwen_image.family import QwenImage

# Krea2Pipeline's prompt layout: prefix + caption, padded to TEXT_LENGTH + PREFIX_TOKENS - SUFFIX_ROOM tokens, then the
# suffix; the first PREFIX_TOKENS states are dropped (the pipeline's constants, for Qwen3-VL's tokenizer)
PREFIX = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
          "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"
PREFIX_TOKENS, SUFFIX_ROOM, TEXT_LENGTH = 34, 5, 512
SHIFT_MU, SHIFT_TOKENS = (0.5, 1.15), (256, 6400)  # its scheduler's base/max shift and image tokens
# the reference model's module names (musubi-tuner's, ComfyUI's) of diffusers' standalone layers
REFERENCE_NAMES = {"img_in": "first", "final_layer.linear": "last.linear", "time_embed.linear_1": "tmlp.0",
                   "time_embed.linear_2": "tmlp.2", "time_mod_proj": "tproj.1", "txt_in.linear_1": "txtmlp.1",
                   "txt_in.linear_2": "txtmlp.3", "text_fusion.projector": "txtfusion.projector"}
BLOCK_LAYERS = {"attn.to_q": "attn.wq", "attn.to_k": "attn.wk", "attn.to_v": "attn.wv", "attn.to_gate": "attn.gate",
                "attn.to_out.0": "attn.wo", "ff.gate": "mlp.gate", "ff.up": "mlp.up", "ff.down": "mlp.down"}
# the module paths of its LoRA files (reference_name's answers)
LORA_FILE_MODULES = re.compile("|".join([
    r"(blocks|txtfusion\.layerwise_blocks|txtfusion\.refiner_blocks)\.\d+\.("
    + "|".join(re.escape(name) for name in BLOCK_LAYERS.values()) + ")",
    *(re.escape(name) for name in REFERENCE_NAMES.values())]))
_BLOCK = re.compile(r"(transformer_blocks|text_fusion\.layerwise_blocks|text_fusion\.refiner_blocks)\.(\d+)\.(.+)$")


class Krea2(FileNamedLora, Krea2Rules, QwenImage, ModelFamily):
    implementation = "https://github.com/krea-ai/krea-2"
    native_size = 1024
    transformer_class = "Krea2Transformer2DModel"
    default_t5_length = TEXT_LENGTH
    text_encoder_specs = (TextEncoderSpec("Qwen3VLModel", "text_encoder", "auto", "tokenizer", "Qwen3-VL",
                                          max_length=TEXT_LENGTH + PREFIX_TOKENS - SUFFIX_ROOM,
                                          template=PREFIX.replace("{", "{{").replace("}", "}}") + "{}"),)
    text_layers: tuple[int, ...] = (2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35)  # Krea2Pipeline's default
    distilled = False
    suffix_ids: tuple[int, ...] = ()  # the suffix's tokens, set when loaded
    lora_file_modules = LORA_FILE_MODULES

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        model = QwenImage.load(self, folder, weight_dtype, vae_path, random_init)
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
        family = model.family  # QwenImage.load's copy
        family.text_layers = tuple(index.get("text_encoder_select_layers") or self.text_layers)
        family.distilled = bool(index.get("is_distilled", False))
        family.suffix_ids = tuple(model.tokenizers[0](SUFFIX).input_ids)
        return model

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """The prefix and caption padded to their fixed length, then the suffix, as Krea2Pipeline tokenizes."""
        (ids,) = FlowFamily.tokenize(self, tokenizers, captions, fmt)
        return [torch.cat([ids, torch.tensor(self.suffix_ids, dtype=ids.dtype).expand(len(ids), -1)], dim=1)]

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the layers `text_layers` stacked per token after the prefix: (B, L, layers x D); the text mask), as
        Krea2Pipeline encodes (positions count real tokens only, so the suffix follows the caption)."""
        (qwen,), (ids,) = text_encoders, input_ids
        mask = ids != self.pad_token_id
        positions = (mask.long().cumsum(dim=-1) - 1).clamp(min=0).unsqueeze(0).expand(3, -1, -1)
        states = run_frozen(qwen, lambda: qwen(input_ids=ids, attention_mask=mask, position_ids=positions,
                                               output_hidden_states=True).hidden_states)
        hidden = torch.cat([states[i] for i in self.text_layers], dim=-1)[:, PREFIX_TOKENS:]
        return hidden, mask[:, PREFIX_TOKENS:].to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): packed into (h/2 x w/2) tokens of C x 4 after the text's (at the
        origin), and back."""
        from diffusers import Krea2Pipeline

        assert text_mask is not None, "Krea 2's encode_prompts gives the text mask"
        _, _, height, width = noisy.shape
        positions = Krea2Pipeline.prepare_position_ids(hidden.shape[1], height // 2, width // 2, noisy.device)
        out = unet(hidden_states=pack_latents(noisy), encoder_hidden_states=self._layered(hidden).to(noisy.dtype),
                   timestep=timesteps.to(noisy.dtype) / 1000, position_ids=positions,
                   encoder_attention_mask=text_mask.bool().to(noisy.device), return_dict=False)[0]
        return unpack_latents(out, height, width)

    def _layered(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, L, layers x D) as the transformer reads it: (B, L, layers, D)."""
        return hidden.unflatten(-1, (len(self.text_layers), -1))

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """timestep_sampling 'krea2_shift' (musubi-tuner's): 'sigmoid', shifted by e^mu with mu linear in the packed
        tokens from 0.5 at 256 to 1.15 at 6400, as Krea2Pipeline samples a base model; the others as every family."""
        if self.settings.timestep_sampling != "krea2_shift":
            return FlowFamily.draw_sigmas(self, normal, uniform, latent_size, min_timestep, max_timestep)
        (low, high), (fewest, most) = SHIFT_MU, SHIFT_TOKENS
        mu = low + (high - low) * (self.image_tokens(*latent_size) - fewest) / (most - fewest)
        return shifted(torch.sigmoid(self.settings.sigmoid_scale * normal), math.exp(mu))

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        return FlowFamily.to_checkpoint(self, model, denoiser_state)

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 1.0, "use_dynamic_shifting": True, "base_shift": SHIFT_MU[0], "max_shift": SHIFT_MU[1],
                "base_image_seq_len": SHIFT_TOKENS[0], "max_image_seq_len": SHIFT_TOKENS[1]}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import Krea2Pipeline

        return Krea2Pipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                             tokenizer=model.tokenizers[0], transformer=model.unet,
                             text_encoder_select_layers=self.text_layers, is_distilled=self.distilled)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        assert text_mask is not None, "Krea 2's encode_prompts gives the text mask"
        layered, mask = self._layered(hidden), text_mask.bool()
        return {"prompt_embeds": layered[:1], "prompt_embeds_mask": mask[:1],
                "negative_prompt_embeds": layered[1:], "negative_prompt_embeds_mask": mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        """Krea 2's guidance_scale g computes cond + g (cond - uncond): the usual CFG scale less one (0: none)."""
        return {"guidance_scale": max(cfg_scale - 1.0, 0.0)}

    def model_index(self) -> dict[str, Any]:
        return {"vae": ["diffusers", self.vae_class], "text_encoder_select_layers": list(self.text_layers),
                "is_distilled": self.distilled, "patch_size": 2}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "ss_network_module": "networks.lora_krea2"}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """Every Linear layer, under the reference model's names (musubi-tuner's default targets)."""
        return [path_target(reference_name(path), (module,))
                for path, module in unet.named_modules() if isinstance(module, nn.Linear)]


def reference_name(path: str) -> str:
    """The reference model's name of a diffusers Krea2Transformer2DModel layer (diffusers' own conversion, inverted)."""
    if path in REFERENCE_NAMES:
        return REFERENCE_NAMES[path]
    found = _BLOCK.match(path)
    if found is None or found[3] not in BLOCK_LAYERS:
        raise ValueError(f"{path}: a Krea 2 layer without a reference name")
    blocks = {"transformer_blocks": "blocks"}.get(found[1], found[1].replace("text_fusion", "txtfusion"))
    return f"{blocks}.{found[2]}.{BLOCK_LAYERS[found[3]]}"


KREA2 = Krea2()
