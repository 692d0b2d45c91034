"""HiDream-O1-Image (HiDream-ai/HiDream-O1-Image), as musubi-tuner's hidream_o1_train_network.py and
hidream_o1_train.py train it (t2i):

- no VAE: the images in [-1, 1] are the latents (trainers/models/pixel_space.py), packed by `denoise` into 32x32
  patch tokens (3072 values each).
- no separate text encoder: the caption in the chat template (a user turn, then the assistant's) followed by
  <|boi_token|><|tms_token|> is tokenized once (padded to 512 tokens and cut before its suffix), and the denoiser's
  own Qwen3-VL decoder reads it at every step (model.py); `encode_prompts` carries the ids (the second tensor) with
  the text mask as the (B, L, 1) hidden states, so the caches, memos and collation hold them as other families'.
- the noisy input is (1 - sigma) x + sigma * s * noise, the noise clipped at noise_clip_std deviations (each image's
  own) and s linear in sigma from noise_scale_start (sigma 1) to noise_scale_end (sigma 0) (`shaped_noise`); the
  model reads t = 1 - sigma and predicts the clean image, scored against it (weighting_scheme 'none'): `denoise`
  returns (noisy - x) / sigma, which the flow layer's latents target (flow_target 'latents') turns back into x.

Samples: the family's own flow-matching Euler loop (pipeline.py; diffusers 0.42.1 has no HiDream-O1 pipeline) with
CFG on a negative prompt, shift 3 (full) or 1 (dev), from noise_scale_start x N(0, 1).

LoRA files: networks.lora_hidream_o1's t2i modules (every decoder layer's q/k/v/o and gate/up/down projections,
x_embedder.proj1/proj2, final_layer2.linear) named `lora_unet_<module path>` after Comfy-Org's file (ComfyUI's
generic map reads every key); musubi-tuner's own files (`lora_unet_model_<path>`, its wrapper's `model.`) are read
too (`lora_in_own_names`).
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelFiles, ModelLoadError, SizeConditioning
from trainers.models.flow import FlowFamily, flux_sigmas, last_blocks
from trainers.models.hidream_o1.rules import MARKER, REPOSITORIES, ROOTS, HiDreamO1Rules

TEXT_LENGTH = 512
PREFIX = "<|im_start|>user\n"  # Qwen3-VL's chat template of one user turn and the generation prompt
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<|boi_token|><|tms_token|>"
# musubi-tuner's defaults per model_type: (noise_scale_start, noise_clip_std, the samples' shift)
VARIANTS = {"full": (8.0, 0.0, 3.0), "dev": (7.5, 2.5, 1.0)}
MUSUBI_PREFIX = "lora_unet_model_"  # musubi-tuner's LoRA names (its Qwen3VLForConditionalGeneration's `model.`)
LAYER_NAMES = re.compile(r"^(?:model\.)?layers\.\d+\.")


class HiDreamO1(HiDreamO1Rules, FlowFamily, ModelFamily):
    implementation = "https://github.com/HiDream-ai/HiDream-O1-Image"
    native_size = 2048
    transformer_class = "HiDreamO1Transformer"  # trainers/models/hidream_o1/model.py
    vae_class = "PixelSpace"
    flow_target = "latents"  # scored against the clean image (denoise gives what turns back into it)
    default_t5_length = TEXT_LENGTH
    text_encoder_specs = ()
    lora_network_module = "networks.lora_hidream_o1"
    model_type = "full"
    noise_scale = (8.0, 8.0)  # (at sigma 1, at sigma 0)
    noise_clip_std = 0.0
    pad_token_id = 0  # its tokenizer's, set when loaded

    # --- loading ---

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        raise ModelLoadError(f"{folder}: HiDream-O1-Image is read from its single file (Comfy-Org's checkpoints/"
                             "hidream_o1_image_bf16.safetensors, or HiDream-ai's weights as one .safetensors): "
                             "diffusers has no HiDream-O1 pipeline folder")

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        """The one file: the denoiser (any of ROOTS' nestings; HiDream-ai's lm_head and deepstack mergers, which
        image generation never runs, left out); the tokenizer from tokenizer_cache_dir (HiDream-ai's, the Dev
        repository's for a file named so; fetched once)."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from trainers.models.hidream_o1.text import CaptionTokens
        from trainers.models.pixel_space import PixelSpace

        variant = "dev" if self.distilled_base(ckpt.path) is not None else self.model_type
        tokenizer = load_tokenizer(files.tokenizer_cache_dir, variant)
        denoiser = self._denoiser(ckpt, weight_dtype, tokenizer)
        family = copy.copy(self)
        family.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        family.model_type = variant  # until a run's model_type says otherwise (Generate: the file's name)
        family.noise_scale = (VARIANTS[variant][0],) * 2
        family.noise_clip_std = VARIANTS[variant][1]
        shift = VARIANTS[variant][2]
        return LoadedModel(family, denoiser, PixelSpace(), [CaptionTokens()], [tokenizer],
                           FlowMatchEulerDiscreteScheduler(shift=shift), "flow", str(ckpt.path))

    def _denoiser(self, ckpt: Any, weight_dtype: torch.dtype, tokenizer: Any) -> nn.Module:
        from accelerate import init_empty_weights

        from trainers.models.component_files import fill_meta
        from trainers.models.hidream_o1.model import HiDreamO1Transformer

        root = next(r for r in ROOTS if f"{r}{MARKER}weight" in ckpt.shapes)
        state = {k[len(root):]: v for k, v in ckpt.tensors(root).items() if _kept(k[len(root):])}
        config = config_from_shapes({k: tuple(v.shape) for k, v in state.items()}, ckpt.path.name)
        config["tms_token_id"] = tokenizer.convert_tokens_to_ids("<|tms_token|>")
        with init_empty_weights():
            transformer = HiDreamO1Transformer(**config)
        return fill_meta(transformer, state, weight_dtype, "HiDream-O1-Image denoiser")

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """Comfy-Org's single file: the denoiser's tensors under their bare module names."""
        return {k: v for k, v in denoiser_state.items() if _kept(k)}

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = super().configured(values)
        clone.model_type = str(values.get("model_type") or self.model_type)
        start_default, clip_default = VARIANTS[clone.model_type][:2]
        start = _or(values.get("noise_scale_start"), start_default)
        clone.noise_scale = (start, _or(values.get("noise_scale_end"), start))
        clone.noise_clip_std = _or(values.get("noise_clip_std"), clip_default)
        return clone

    def finetuned_part(self, denoiser: nn.Module) -> nn.Module:
        """All but the vision tower, which text-to-image never runs (musubi-tuner's t2i finetune freezes it too)."""
        return nn.ModuleList([denoiser.language_model, denoiser.t_embedder1, denoiser.x_embedder,
                              denoiser.final_layer2])

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        return last_blocks(denoiser.language_model.layers, count, "decoder layers")

    # --- text ---

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """The chat template around each caption, <|boi_token|><|tms_token|> after it, padded to 512 tokens (a
        longer caption is cut, never its suffix)."""
        (tok,) = tokenizers
        head, tail = (tok(part, add_special_tokens=False).input_ids for part in (PREFIX, SUFFIX))
        room = TEXT_LENGTH - len(head) - len(tail)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        rows = []
        for caption in captions:
            ids = head + tok(caption, add_special_tokens=False).input_ids[:room] + tail
            rows.append(ids + [pad] * (TEXT_LENGTH - len(ids)))
        return [torch.tensor(rows, dtype=torch.long)]

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the text mask as (B, 512, 1) floats, the token ids (B, 512)): the denoiser's decoder reads the ids."""
        (ids,) = input_ids
        mask = (ids != self.pad_token_id).float()
        return mask[..., None], ids.long()

    # --- training ---

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                second: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """(noisy - x) / sigma in float32 for the noisy pixels (B, 3, H, W) at timesteps 1000 sigma: the flow layer
        scores noisy - sigma * that, the model's clean-image prediction x, against the image."""
        from trainers.models.hidream_o1.model import patchify, unpatchify

        ids, mask = split_text(hidden, second)
        height, width = noisy.shape[-2:]
        sigma = (timesteps.float() / 1000).view(-1, 1, 1, 1)
        patches = patchify(noisy)
        clean = unet(ids, mask, patches, (height // 32, width // 32), 1 - sigma.flatten())
        x = unpatchify(clean.float(), height, width)
        return (noisy.float() - x) / sigma.clamp_min(1e-12)

    def shaped_noise(self, noise: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
        return scaled_noise(noise, sigmas, self.noise_scale, self.noise_clip_std)

    def draw_sigmas(self, normal: torch.Tensor, uniform: torch.Tensor, latent_size: tuple[int, int],
                    min_timestep: int | None, max_timestep: int | None) -> torch.Tensor:
        """timestep_sampling's draw; 'uniform' within [min_timestep, max_timestep] / 1000, as musubi-tuner's."""
        if self.settings.timestep_sampling == "uniform":
            low = (min_timestep or 0) / 1000
            high = (max_timestep if max_timestep is not None else 1000) / 1000
            return uniform * (high - low) + low
        # 'flux_shift' counts an image's tokens as FLUX.1 would at that size (a 16x16-pixel token)
        return flux_sigmas(self.settings, normal, uniform, (latent_size[0] // 8, latent_size[1] // 8))

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        return raw

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from trainers.models.hidream_o1.pipeline import HiDreamO1Pipeline

        return HiDreamO1Pipeline(model.unet, scheduler, self.noise_scale[0])

    def inference_scheduler(self, model: Any, sampler: str) -> Any:
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler(shift=VARIANTS[self.model_type][2])

    def pipeline_embeds(self, hidden: torch.Tensor, second: torch.Tensor | None) -> dict[str, Any]:
        ids, mask = split_text(hidden, second)
        return {"prompt_ids": ids[:1], "prompt_mask": mask[:1], "negative_ids": ids[1:], "negative_mask": mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        return latents.float().clamp(-1, 1)

    def default_size(self, prediction_type: str) -> int:
        return self.native_size

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": self.lora_network_module,
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """networks.lora_hidream_o1's t2i modules (its embed_tokens and lm_head excluded) under Comfy-Org's paths."""
        targets = []
        for i, layer in enumerate(unet.language_model.layers):
            for kind, module in (("self_attn", layer.self_attn), ("mlp", layer.mlp)):
                for name, child in module.named_children():
                    if isinstance(child, nn.Linear):
                        targets.append(_target(f"language_model.layers.{i}.{kind}.{name}", child))
        targets += [_target("x_embedder.proj1", unet.x_embedder.proj1), _target("x_embedder.proj2",
                    unet.x_embedder.proj2), _target("final_layer2.linear", unet.final_layer2.linear)]
        return targets

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        """musubi-tuner's files name the modules under its wrapper's `model.`: read as Comfy-Org's paths."""
        return {("lora_unet_" + k[len(MUSUBI_PREFIX):]) if k.startswith(MUSUBI_PREFIX) else k: v
                for k, v in state.items()}

    def lora_in_musubi_names(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """musubi-tuner's names of the same modules (`tools convert --to musubi`): under its wrapper's `model.`."""
        return {(MUSUBI_PREFIX + k[len("lora_unet_"):]) if k.startswith("lora_unet_") else k: v
                for k, v in state.items()}


def _target(path: str, layer: nn.Linear) -> LoraTarget:
    return LoraTarget("lora_unet_" + path.replace(".", "_"), (layer,), path=path)


def _or(value: Any, default: float) -> float:
    return float(default if value is None else value)


def _kept(key: str) -> bool:
    """The tensors of the published single file: not the LM head or the deepstack mergers (HiDream-ai's weights
    have them; image generation runs neither)."""
    return not key.startswith("lm_head.") and ".deepstack_merger_list." not in key


def split_text(hidden: torch.Tensor, second: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of encode_prompts' output, the padding common to the batch cut off (it changes nothing)."""
    assert second is not None, "HiDream-O1's encode_prompts gives the token ids"
    mask = hidden[..., 0] > 0.5
    length = int(mask.any(0).nonzero().max()) + 1 if mask.any() else 1
    return second[:, :length].to(hidden.device).long(), mask[:, :length].long()


def scaled_noise(noise: torch.Tensor, sigmas: torch.Tensor, scale: tuple[float, float], clip_std: float
                 ) -> torch.Tensor:
    """musubi-tuner's HiDream-O1 noise: clipped at clip_std of each sample's own deviation (musubi-tuner takes the
    batch's), then scaled by start + (end - start) (1 - sigma)."""
    view = (-1, *[1] * (noise.ndim - 1))
    if clip_std > 0:
        limit = clip_std * noise.float().flatten(1).std(dim=1).view(view).to(noise.dtype)
        noise = torch.maximum(torch.minimum(noise, limit), -limit)
    start, end = scale
    factor = start + (end - start) * (1 - sigmas.to(noise.device, torch.float32))
    return noise * factor.view(view).to(noise.dtype)


def load_tokenizer(cache_dir: str, model_type: str) -> Any:
    """HiDream-ai's Qwen3-VL tokenizer (its <|boi_token|> and <|tms_token|>) from tokenizer_cache_dir, else the hub
    (once)."""
    from transformers import AutoTokenizer

    from trainers.models.component_files import cached_tokenizer

    return cached_tokenizer(AutoTokenizer, REPOSITORIES[model_type], cache_dir)


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """The denoiser's config: the sizes from the tensors, the rest (rope, norms, activations) from arch/config.json."""
    published = json.loads((Path(__file__).with_name("arch") / "config.json").read_text())
    try:
        vocab, width = shapes["language_model.embed_tokens.weight"]
        head = shapes["language_model.layers.0.self_attn.q_norm.weight"][0]
        layers = 1 + max(int(k.split(".")[2]) for k in shapes if k.startswith("language_model.layers."))
        text = {**published["text_config"], "vocab_size": vocab, "hidden_size": width, "head_dim": head,
                "num_hidden_layers": layers,
                "intermediate_size": shapes["language_model.layers.0.mlp.gate_proj.weight"][0],
                "num_attention_heads": shapes["language_model.layers.0.self_attn.q_proj.weight"][0] // head,
                "num_key_value_heads": shapes["language_model.layers.0.self_attn.k_proj.weight"][0] // head}
        if head != published["text_config"]["head_dim"]:  # a smaller model: MRoPE's sections scaled to its head
            spatial = head // 2 * 20 // 64
            text["rope_parameters"] = {**text["rope_parameters"],
                                       "mrope_section": [head // 2 - 2 * spatial, spatial, spatial]}
        embed = shapes["visual.patch_embed.proj.weight"]
        vision_width = embed[0]
        vision = {**published["vision_config"], "hidden_size": vision_width, "patch_size": embed[-1],
                  "temporal_patch_size": embed[2], "num_heads": max(1, vision_width // 72),
                  "depth": 1 + max(int(k.split(".")[2]) for k in shapes if k.startswith("visual.blocks.")),
                  "intermediate_size": shapes["visual.blocks.0.mlp.linear_fc1.weight"][0],
                  "out_hidden_size": shapes["visual.merger.linear_fc2.weight"][0],
                  "num_position_embeddings": shapes["visual.pos_embed.weight"][0]}
    except (KeyError, ValueError) as err:
        raise ModelLoadError(f"{name} is not a complete HiDream-O1-Image file (no {err})") from None
    return {"text_config": text, "vision_config": vision}


HIDREAM_O1 = HiDreamO1()
