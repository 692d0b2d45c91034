"""Lumina Image 2.0 (diffusers Lumina2Transformer2DModel, Lumina2Pipeline), as sd-scripts' lumina_train_network.py
trains it: captions after the pipeline's system prompt read by Gemma 2 (its second-to-last hidden states, with the
text's attention mask), a single-stream NextDiT transformer that patchifies FLUX.1's 16-channel latents itself,
timestep t = 1 - sigma, and an output that is minus the velocity (sd-scripts' target: latents - noise). Its LoRAs
train sd-scripts' modules (NextDiT: `lora_unet_layers_0_attention_qkv`, q, k and v as one module,
`feed_forward_w1`-`w3`, `adaLN_modulation_1`) on every block (main layers and both refiners); the files name them as
diffusers' load_lora_weights and ComfyUI both read them (`diffusion_model.layers.0.attention.qkv.lora_A.weight`, the
alpha folded in), which leaves out the final layer networks.lora_lumina also trains: diffusers refuses a file with it.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, last_blocks, run_frozen
from trainers.models.flow_sigmas import flux_resolution_shift
from trainers.models.lora_file_names import FileNamedLora, path_target
from trainers.models.lumina2.rules import SYSTEM_PROMPT, TEXT_LENGTH, Lumina2Rules

TEMPLATE = SYSTEM_PROMPT + " <Prompt Start> {}"


class Lumina2(FileNamedLora, Lumina2Rules, FlowFamily, ModelFamily):
    implementation = "https://github.com/Alpha-VLLM/Lumina-Image-2.0"
    transformer_class = "Lumina2Transformer2DModel"
    default_t5_length = TEXT_LENGTH
    latent_scaling = (0.3611, 0.1159)  # FLUX.1's autoencoder
    fixed_settings = {"guidance_scale": 0.0}  # no guidance embedding
    lora_network_module = "networks.lora_lumina"  # ss_network_module of its LoRAs
    lora_file_modules = re.compile(r"(noise_refiner|context_refiner|layers)\.\d+\."  # _block_targets' paths
                                   r"(attention\.(qkv|out)|feed_forward\.w[123]|adaLN_modulation\.1)")
    text_encoder_specs = (TextEncoderSpec("Gemma2Model", "text_encoder", "auto", "tokenizer", "Gemma 2",
                                          max_length=TEXT_LENGTH, template=TEMPLATE),)

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """The transformer alone in the reference (NextDiT) layout: ComfyUI's diffusion_models file, sd-scripts'
        lumina model file."""
        from accelerate.utils import extract_model_from_parallel

        from trainers.models.lumina2 import reference

        return reference.to_reference(denoiser_state, extract_model_from_parallel(model.unet).config)

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        return last_blocks(denoiser.layers, count, "layers")

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": 6.0, "use_dynamic_shifting": False}

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """timestep_sampling 'nextdit_shift' (sd-scripts' for Lumina 2): uniform, shifted by the image's size as
        'flux_shift' is; the others as every family."""
        if self.settings.timestep_sampling != "nextdit_shift":
            return super().draw_sigmas(normal, uniform, latent_size, min_timestep, max_timestep)
        height, width = latent_size
        return flux_resolution_shift(uniform.clamp(min=1e-7), (height // 2) * (width // 2))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Gemma 2's second-to-last hidden states; the text mask), as Lumina2Pipeline and sd-scripts encode."""
        (gemma,), (ids,) = text_encoders, input_ids
        mask = (ids != gemma.config.pad_token_id).long()
        hidden = run_frozen(gemma, lambda: gemma(ids, attention_mask=mask, output_hidden_states=True
                                                 ).hidden_states[-2])
        return hidden, mask.to(hidden.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): the transformer reads them at t = 1 - sigma and returns minus the
        velocity."""
        assert text_mask is not None, "Lumina 2's encode_prompts gives the text mask"
        out = unet(hidden_states=noisy, timestep=1 - timesteps.to(noisy.dtype) / 1000,
                   encoder_hidden_states=hidden.to(noisy.dtype), encoder_attention_mask=text_mask.to(noisy.device).long(),
                   return_dict=False)[0]
        return -out

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import Lumina2Pipeline

        return Lumina2Pipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                               tokenizer=model.tokenizers[0], transformer=model.unet)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        assert text_mask is not None, "Lumina 2's encode_prompts gives the text mask"
        mask = text_mask.long()
        return {"prompt_embeds": hidden[:1], "prompt_attention_mask": mask[:1],
                "negative_prompt_embeds": hidden[1:], "negative_prompt_attention_mask": mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": self.lora_network_module,
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """Every block's layers, and the final layer's (read from older files; not trained: lora_target_dims)."""
        blocks = [(f"{kind}.{i}", block) for kind in ("noise_refiner", "context_refiner", "layers")
                  for i, block in enumerate(getattr(unet, kind))]
        return [*(t for name, block in blocks for t in _block_targets(name, block)), *_final_targets(unet)]

    def lora_target_dims(self, targets: list[LoraTarget], args: Mapping[str, str], dim: int) -> dict[str, int]:
        """network_dim on the blocks; 0 on the final layer, which diffusers' Lumina 2 loader refuses in a file."""
        return {target.name: 0 if target.name in FINAL_LAYER else dim for target in targets}


FINAL_LAYER = ("lora_unet_final_layer_adaLN_modulation_1", "lora_unet_final_layer_linear")


def _block_targets(path: str, block: nn.Module) -> Iterator[LoraTarget]:
    """A NextDiT block's layers under sd-scripts' names (attention.qkv fused, attention.out, feed_forward.w1-3 and
    the modulation adaLN_modulation.1, which the context refiners have not)."""
    attn = block.attn
    yield path_target(f"{path}.attention.qkv", (attn.to_q, attn.to_k, attn.to_v))
    yield path_target(f"{path}.attention.out", (attn.to_out[0],))
    for index in (1, 2, 3):
        yield path_target(f"{path}.feed_forward.w{index}", (getattr(block.feed_forward, f"linear_{index}"),))
    if (modulation := getattr(block.norm1, "linear", None)) is not None:
        yield path_target(f"{path}.adaLN_modulation.1", (modulation,))


def _final_targets(unet: nn.Module) -> Iterator[LoraTarget]:
    yield LoraTarget(FINAL_LAYER[0], (unet.norm_out.linear_1,))
    yield LoraTarget(FINAL_LAYER[1], (unet.norm_out.linear_2,))


LUMINA2 = Lumina2()
