"""HiDream-I1 (diffusers HiDreamImageTransformer2DModel, HiDreamImagePipeline), as its pipeline runs it and
ai-toolkit and SimpleTuner train it: each caption read by four text encoders, 128 tokens each (CLIP-L's and CLIP-G's
projected pooled outputs side by side; T5-XXL's last hidden states; Llama-3.1-8B-Instruct's hidden states of every
layer, hidden_states[1:], each block of the transformer reading the one its llama_layers names), a dual- and
single-stream transformer with MoE feed-forwards over 2x2 patches of FLUX.1's 16-channel latents, timestep =
sigma x 1000, no guidance embedding. The transformer predicts the negated velocity (its pipeline negates it):
denoise gives the velocity, as every flow family here.

encode_prompts gives (T5's 128 states, then each Llama layer's 128, zero-padded to the wider of the two; the pooled
CLIP outputs): the layer's one-tensor interface, cached as one row; denoise and pipeline_embeds split it again.

In training mode the transformer's MoE runs every expert on its routed tokens, and its output comes back as
(B, C, tokens, 2 x 2) patches (unpatchify's training layout; non-square latents padded to max_resolution's tokens):
denoise puts them back on the latent grid. LoRA files name the modules `diffusion_model.<diffusers module path>`
with lora_A/lora_B, the alpha folded in (FileNamedLora): what diffusers' HiDreamImagePipeline.load_lora_weights
converts (its _convert_non_diffusers_hidream_lora_to_diffusers) and ComfyUI's generic `diffusion_model.<path>` keys
load (its HiDream model has the published, diffusers-named weights).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelLoadError, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, last_blocks, run_frozen, t5_attention_mask
from trainers.models.hidream.rules import VARIANT_SHIFTS, HiDreamRules, variant_of
from trainers.models.lora_file_names import FileNamedLora, path_target

TEXT_LENGTH = 128  # the pipeline's max_sequence_length, for each of the four encoders
BLOCKS = ("double_stream_blocks.", "single_stream_blocks.")
LLAMA_HELP = ("HiDream-I1 reads captions with Llama-3.1-8B-Instruct too, which the published folders leave out (its "
              "own license): accept Meta's Llama 3.1 Community License on the hub, download "
              "meta-llama/Llama-3.1-8B-Instruct, and put its model files in the folder as text_encoder_4 and its "
              "tokenizer files as tokenizer_4 (model_index.json names them: LlamaForCausalLM, "
              "PreTrainedTokenizerFast)")
# the module paths of its files: the blocks' (what it trains) and the other Linear layers ai-toolkit's files hold
LORA_FILE_MODULES = re.compile(r"(double|single)_stream_blocks\.\d+\.block\.[\w.]+|caption_projection\.\d+\.linear"
                               r"|x_embedder\.proj|(t_embedder\.timestep|p_embedder\.pooled)_embedder\.linear_[12]"
                               r"|final_layer\.(linear|adaLN_modulation\.1)")


class HiDream(FileNamedLora, HiDreamRules, FlowFamily, ModelFamily):
    implementation = "https://github.com/HiDream-ai/HiDream-I1"
    native_size = 1024
    transformer_class = "HiDreamImageTransformer2DModel"
    vae_class = "AutoencoderKL"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    latent_scaling = (0.3611, 0.1159)  # FLUX.1's ae (unused: no single files)
    text_encoder_specs = (
        TextEncoderSpec("CLIPTextModelWithProjection", "text_encoder", "clip", "tokenizer", "CLIP-L",
                        max_length=TEXT_LENGTH),
        TextEncoderSpec("CLIPTextModelWithProjection", "text_encoder_2", "clip", "tokenizer_2", "CLIP-G",
                        max_length=TEXT_LENGTH),
        TextEncoderSpec("T5EncoderModel", "text_encoder_3", "t5", "tokenizer_3", "T5-XXL", max_length=TEXT_LENGTH),
        TextEncoderSpec("LlamaForCausalLM", "text_encoder_4", "auto", "tokenizer_4", "Llama 3.1",
                        max_length=TEXT_LENGTH))
    lora_file_modules = LORA_FILE_MODULES
    variant = "full"  # "dev" or "fast": told from the scheduler config when loaded (rules.variant_of)
    t5_width = 4096  # T5's and Llama's hidden sizes, set when loaded (the packed states' channels of each)
    llama_width = 4096
    llama_pad_id = 0  # Llama's padding (its end token, as the pipeline pads), set when loaded

    def load(self, folder: Any, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        from diffusers import FlowMatchEulerDiscreteScheduler

        if not random_init and not all((Path(folder) / sub).is_dir() for sub in ("text_encoder_4", "tokenizer_4")):
            raise ModelLoadError(f"{folder} has no text_encoder_4 and tokenizer_4: {LLAMA_HELP}")
        scheduler_file = Path(folder) / "scheduler" / "scheduler_config.json"
        config = json.loads(scheduler_file.read_text(encoding="utf-8")) if scheduler_file.is_file() else {}
        model = super().load(folder, weight_dtype, vae_path, random_init)
        llama_tokenizer = model.tokenizers[3]
        llama_tokenizer.pad_token = llama_tokenizer.eos_token  # as HiDreamImagePipeline pads
        family = copy.copy(model.family)
        family.variant = variant_of(config) if config else "full"
        family.t5_width = model.text_encoders[2].config.d_model
        family.llama_width = model.text_encoders[3].config.hidden_size
        family.llama_pad_id = llama_tokenizer.pad_token_id
        # Full's UniPC config read as flow-matching Euler at its shift (what training and samples use)
        scheduler = FlowMatchEulerDiscreteScheduler(shift=VARIANT_SHIFTS[family.variant])
        return dataclasses.replace(model, family=family, noise_scheduler=scheduler)

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        """The last of its double- then single-stream blocks (48 published)."""
        blocks = nn.ModuleList([*denoiser.double_stream_blocks, *denoiser.single_stream_blocks])
        return last_blocks(blocks, count, "blocks")

    def scheduler_config(self) -> dict[str, Any]:
        return {"shift": VARIANT_SHIFTS[self.variant]}

    # --- text ---

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(T5-XXL's last hidden states, then Llama's hidden states of each layer after the embedding, each 128 tokens
        with the padding as the pipeline reads it (unmasked in the transformer); the two CLIPs' projected pooled
        outputs side by side), as HiDreamImagePipeline.encode_prompt gives them."""
        clip_l, clip_g, t5, llama = text_encoders
        pooled = [run_frozen(clip, lambda clip=clip, ids=ids: clip(ids, output_hidden_states=True)[0])
                  for clip, ids in zip((clip_l, clip_g), input_ids[:2])]
        t5_ids, llama_ids = input_ids[2], input_ids[3]
        t5_states = run_frozen(t5, lambda: t5(t5_ids, attention_mask=t5_attention_mask(t5_ids, 0))[0])
        llama_mask = (llama_ids != self.llama_pad_id).long()
        layers = run_frozen(llama, lambda: llama.model(input_ids=llama_ids, attention_mask=llama_mask,
                                                       output_hidden_states=True).hidden_states[1:])
        width = max(t5_states.shape[-1], layers[0].shape[-1])
        hidden = torch.cat([_widened(t5_states, width), *(_widened(s.to(t5_states.dtype), width) for s in layers)],
                           dim=1)
        return hidden, torch.cat(pooled, dim=-1)

    def split_states(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """encode_prompts' packed states as (T5's (B, L, D), Llama's layers (layers, B, L, D))."""
        length = self.text_length(self.text_encoder_specs[2])
        t5 = hidden[:, :length, :self.t5_width]
        llama = hidden[:, length:, :self.llama_width].unflatten(1, (-1, length)).transpose(0, 1)
        return t5, llama

    # --- training ---

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w): the transformer's output negated (as its pipeline does), its
        training-mode patches put back on the grid."""
        assert pooled is not None, "HiDream-I1's encode_prompts gives the pooled CLIP outputs"
        t5, llama = self.split_states(hidden)
        out = unet(hidden_states=noisy, timesteps=timesteps.to(noisy.dtype),
                   encoder_hidden_states_t5=t5.to(noisy.dtype), encoder_hidden_states_llama3=llama.to(noisy.dtype),
                   pooled_embeds=pooled.to(noisy.dtype), return_dict=False)[0]
        if unet.training and not unet.config.force_inference_output:
            out = patches_to_grid(out, noisy.shape[-2], noisy.shape[-1], unet.config.patch_size)
        return -out

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        """HiDreamImagePipeline; its default size (which it rescales every request's area to) max_resolution's,
        the published 128 x 8 = 1024 pixels."""
        from diffusers import HiDreamImagePipeline

        encoders, tokenizers = model.text_encoders, model.tokenizers
        pipe = HiDreamImagePipeline(
            scheduler=scheduler, vae=model.vae, text_encoder=encoders[0], tokenizer=tokenizers[0],
            text_encoder_2=encoders[1], tokenizer_2=tokenizers[1], text_encoder_3=encoders[2],
            tokenizer_3=tokenizers[2], text_encoder_4=encoders[3], tokenizer_4=tokenizers[3], transformer=model.unet)
        pipe.default_sample_size = model.unet.config.max_resolution[0]
        return pipe

    def pipeline_embeds(self, hidden: torch.Tensor, pooled: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """encode_prompts' (prompt, negative) rows as the pipeline's embeddings."""
        assert pooled is not None, "HiDream-I1's encode_prompts gives the pooled CLIP outputs"
        t5, llama = self.split_states(hidden)
        return {"prompt_embeds_t5": t5[:1], "negative_prompt_embeds_t5": t5[1:],
                "prompt_embeds_llama3": llama[:, :1], "negative_prompt_embeds_llama3": llama[:, 1:],
                "pooled_prompt_embeds": pooled[:1], "negative_pooled_prompt_embeds": pooled[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        """Full: classifier-free guidance at the scale; Dev and Fast (guidance-distilled) sample without it, as
        their published settings (guidance_scale 0)."""
        return {"guidance_scale": cfg_scale if self.variant == "full" else 0.0}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, **self.flow_metadata()}

    def lora_for_pipeline(self, state: dict[str, torch.Tensor], model: Any) -> dict[str, torch.Tensor]:
        """A kohya-named file as load_lora_weights takes it: any Linear layer of the transformer, so that ai-toolkit's
        files (which also train the embedders, caption projections and final layer) render whole."""
        from trainers.models.flow_lora import kohya_to_diffusers

        every = [path_target(path, (module,)) for path, module in model.unet.named_modules()
                 if isinstance(module, nn.Linear)]
        return kohya_to_diffusers(state, model, every, (None,) * len(self.text_encoder_specs))

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """Every Linear layer of the double- and single-stream blocks (attention, the MoE's routed and shared
        experts, the text feed-forward, the modulations); the MoE gate (a bare parameter) stays frozen. ai-toolkit
        targets every Linear of the transformer; its embedders, 49 caption projections and final layer are left out
        here (the blocks are what LoRAs of other DiTs train here too)."""
        return [path_target(path, (module,)) for path, module in unet.named_modules()
                if isinstance(module, nn.Linear) and path.startswith(BLOCKS)]


def patches_to_grid(patches: torch.Tensor, height: int, width: int, patch: int) -> torch.Tensor:
    """The transformer's training-mode output (B, C, tokens, patch x patch), its first (height/patch x width/patch)
    tokens in rows, as latents (B, C, height, width)."""
    batch, channels = patches.shape[:2]
    rows, cols = height // patch, width // patch
    grid = patches[:, :, :rows * cols].reshape(batch, channels, rows, cols, patch, patch)
    return grid.permute(0, 1, 2, 4, 3, 5).reshape(batch, channels, height, width)


def _widened(states: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(states, (0, width - states.shape[-1]))


HIDREAM = HiDream()
