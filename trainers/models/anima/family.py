"""Anima (circlestone-labs/Anima), as sd-scripts' anima_train_network.py and anima_train.py train it: captions read
by Qwen3-0.6B (its last hidden states, zero on the padding, with the text mask) and tokenized by T5's tokenizer for
the LLM adapter's queries (both padded to 512), the adapter and Cosmos-Predict2's DiT in one denoiser
(transformer.py), the Qwen-Image autoencoder's latents normalised by its per-channel statistics, timestep = sigma,
the velocity (noise - latents) as output, no guidance embedding.

Its LoRAs train networks.lora_anima's modules under sd-scripts' kohya names of the original modules
(`lora_unet_blocks_0_self_attn_q_proj`, `..._cross_attn_output_proj`, `..._mlp_layer1`; the adaLN modulations,
embedders and final layer left out as its default excludes them; the adapter's blocks with network_args
train_llm_adapter=True: `lora_unet_llm_adapter_blocks_0_self_attn_q_proj`), which ComfyUI's generic
`lora_unet_<module>` map reads for every key. diffusers 0.42.1 has no Anima DiffusionPipeline; its modular
AnimaModularPipeline reads only the dotted `diffusion_model.` naming (sd-scripts' convert_anima_lora_to_comfy.py).
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.anima.rules import T5_TOKENIZER, TEXT_LENGTH, TRAIN_LLM_ADAPTER, AnimaRules
from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, ModelFiles, ModelLoadError, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec, run_frozen

T5_PAD = 0  # T5's pad id (its tokenizer's and sd-scripts' caption dropout's)
ADAPTER_PREFIXES = ("net.llm_adapter.", "model.diffusion_model.llm_adapter.", "diffusion_model.llm_adapter.",
                    "llm_adapter.")  # an adapter file's nesting (or none)


class Anima(AnimaRules, FlowFamily, ModelFamily):
    implementation = "https://huggingface.co/circlestone-labs/Anima"  # sd-scripts' IMPL_ANIMA
    native_size = 1024
    transformer_class = "AnimaTransformer"  # trainers/models/anima/transformer.py
    vae_class = "AutoencoderKLQwenImage"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    lora_network_module = "networks.lora_anima"  # ss_network_module of its LoRAs
    latent_scaling = (1.0, 0.0)  # unused: its autoencoder normalises by the published per-channel statistics
    text_encoder_specs = (TextEncoderSpec("Qwen3Model", "text_encoder", "auto", "tokenizer", "Qwen3",
                                          max_length=TEXT_LENGTH),)
    pad_token_id: int = 0  # its Qwen3 tokenizer's, set when loaded

    # --- loading ---

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        raise ModelLoadError(f"{folder}: Anima is read from its published single files (diffusion_models/anima-*."
                             "safetensors with text_encoder and ae): diffusers has no Anima pipeline folder")

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        """circlestone-labs/Anima's split files: the DiT with its LLM adapter (or the adapter from llm_adapter_path),
        text_encoder's Qwen3, ae's Qwen-Image VAE; the Qwen3 and T5 tokenizers from tokenizer_cache_dir (or the
        T5 one from t5_tokenizer_path)."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from trainers.models.base import CheckpointKeys
        from trainers.models.flow_checkpoint import load_parts, part_tokenizers
        from trainers.models.qwen_image.family import encode_single_frames

        keys = CheckpointKeys(ckpt.shapes, str(ckpt.path))
        if issues := self.checkpoint_issues(keys, files, vae_path):
            raise ModelLoadError("; ".join(f"{i.field}: {i.message}" for i in issues))
        denoiser = self._denoiser(ckpt, weight_dtype, files.llm_adapter_path)
        text_encoders, vae = load_parts(ckpt, self.checkpoint_parts, files, vae_path, weight_dtype,
                                        *self.latent_scaling, vae_class=self.vae_class)
        tokenizers = [*part_tokenizers(self.checkpoint_parts, files.tokenizer_cache_dir),
                      t5_tokenizer(files.t5_tokenizer_path, files.tokenizer_cache_dir)]
        encode_single_frames(vae)
        family = copy.copy(self)
        family.pad_token_id = tokenizers[0].pad_token_id if tokenizers[0].pad_token_id is not None else \
            tokenizers[0].eos_token_id  # sd-scripts pads with EOS when the tokenizer names no pad token
        return LoadedModel(family, denoiser, vae, text_encoders, tokenizers,
                           FlowMatchEulerDiscreteScheduler(**self.scheduler_config()), "flow", str(ckpt.path))

    def _denoiser(self, ckpt: Any, weight_dtype: torch.dtype, adapter_path: str) -> nn.Module:
        from accelerate import init_empty_weights

        from trainers.models.anima import reference
        from trainers.models.anima.transformer import AnimaTransformer
        from trainers.models.component_files import fill_meta
        from trainers.models.reference_layout import prefix_of

        nested = prefix_of(ckpt.shapes, reference.PREFIXES, reference.MARKER)
        state = dict(reference.strip_prefix(ckpt.tensors(nested)))
        if adapter_path:
            state = {k: v for k, v in state.items() if not k.startswith(reference.ADAPTER)}
            state.update(adapter_tensors(adapter_path))
        config = reference.config_from_shapes({k: tuple(v.shape) for k, v in state.items()}, ckpt.path.name)
        with init_empty_weights():
            transformer = AnimaTransformer.from_config(config)
        weights = reference.to_diffusers(state, config, ckpt.path.name)
        return fill_meta(transformer, weights, weight_dtype, "Anima DiT")

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """The DiT and its LLM adapter as the published diffusion_models file holds them (`net.` names): what ComfyUI
        and sd-scripts read."""
        from accelerate.utils import extract_model_from_parallel

        from trainers.models.anima import reference

        return reference.to_reference(denoiser_state, extract_model_from_parallel(model.unet).config)

    # --- text ---

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """[Qwen3 ids, T5 ids], each padded to 512 and cut there, as sd-scripts' AnimaTokenizeStrategy."""
        return [tok(captions, max_length=TEXT_LENGTH, padding="max_length", truncation=True,
                    return_tensors="pt").input_ids for tok in tokenizers]

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Qwen3's last hidden states, zero on the padding; [the text mask, the T5 ids] as one integer tensor
        (B, 512 + 512)): what the transformer's adapter reads, cached and memoised as one row per caption."""
        (qwen,), (ids, t5_ids) = text_encoders, input_ids
        mask = (ids != self.pad_token_id).long()
        hidden = run_frozen(qwen, lambda: qwen(input_ids=ids, attention_mask=mask).last_hidden_state)
        hidden = hidden * mask[..., None].to(hidden.dtype)
        return hidden, torch.cat([mask, t5_ids.to(mask.device).long()], dim=1)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                second: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, h, w), read as one frame at timestep = sigma."""
        mask, t5_ids = split_text(hidden, second)
        out = unet(noisy.unsqueeze(2), timesteps.to(noisy.dtype) / 1000, hidden.to(noisy.dtype), text_mask=mask,
                   t5_ids=t5_ids, t5_mask=t5_ids != T5_PAD)[0]
        return out.squeeze(2)

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = latent_stats(vae, raw)
        return (raw - mean) / std

    # --- samples ---

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from trainers.models.anima.pipeline import AnimaPipeline

        return AnimaPipeline(model.unet, scheduler, 2 ** len(model.vae.temperal_downsample))

    def pipeline_embeds(self, hidden: torch.Tensor, second: torch.Tensor | None) -> dict[str, Any]:
        mask, t5_ids = split_text(hidden, second)
        return {"prompt_embeds": hidden[:1], "text_mask": mask[:1], "t5_ids": t5_ids[:1],
                "negative_prompt_embeds": hidden[1:], "negative_text_mask": mask[1:], "negative_t5_ids": t5_ids[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        grid = latents.to(vae.device, vae.dtype)
        mean, std = latent_stats(vae, grid)
        return vae.decode((grid * std + mean).unsqueeze(2)).sample[:, :, 0]

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": self.lora_network_module,
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """networks.lora_anima's modules: every DiT block's attention and MLP layers, then the LLM adapter's
        (trained with train_llm_adapter=True: lora_target_dims)."""
        return [*(t for i, block in enumerate(unet.transformer_blocks) for t in _block_targets(i, block)),
                *(t for i, block in enumerate(unet.llm_adapter.blocks) for t in _adapter_targets(i, block))]

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        """A file in the dotted naming (`diffusion_model.blocks.0.self_attn.q_proj.lora_A.weight`: sd-scripts'
        networks/convert_anima_lora_to_comfy.py output, what diffusers' AnimaModularPipeline reads) in kohya's names;
        a module without an alpha keeps its weights' scale (alpha = rank, as ComfyUI reads it)."""
        if not any(k.startswith(DOTTED) for k in state):
            return state
        out: dict[str, torch.Tensor] = {}
        for key, value in state.items():
            if not key.startswith(DOTTED):
                out[key] = value
                continue
            path, _, weight = key.removeprefix(DOTTED).rpartition(".lora_")
            if not path:
                path, _, weight = key.removeprefix(DOTTED).rpartition(".")
            name = "lora_unet_" + path.replace(".", "_")
            out[f"{name}.{DOTTED_WEIGHTS.get(weight, weight)}"] = value
        for down in [k for k in out if k.endswith(".lora_down.weight")]:
            alpha = down.removesuffix("lora_down.weight") + "alpha"
            out.setdefault(alpha, torch.tensor(float(out[down].shape[0])))
        return out

    def lora_target_dims(self, targets: list[LoraTarget], args: Mapping[str, str], dim: int) -> dict[str, int]:
        """network_dim on the DiT's blocks; the adapter's at network_dim with train_llm_adapter=True, else 0."""
        adapter = str(args.get(TRAIN_LLM_ADAPTER, "false")).strip().lower() == "true"
        return {t.name: dim if adapter or not t.name.startswith(ADAPTER_LORA) else 0 for t in targets}


ADAPTER_LORA = "lora_unet_llm_adapter_"
DOTTED = "diffusion_model."  # the dotted naming of converted files
DOTTED_WEIGHTS = {"A.weight": "lora_down.weight", "B.weight": "lora_up.weight", "down.weight": "lora_down.weight",
                  "up.weight": "lora_up.weight"}


def _block_targets(index: int, block: nn.Module) -> Iterator[LoraTarget]:
    prefix = f"lora_unet_blocks_{index}_"
    for kind, attention in (("self_attn", block.attn1), ("cross_attn", block.attn2)):
        for name, layer in (("q_proj", attention.to_q), ("k_proj", attention.to_k), ("v_proj", attention.to_v),
                            ("output_proj", attention.to_out[0])):
            yield LoraTarget(f"{prefix}{kind}_{name}", (layer,))
    yield LoraTarget(f"{prefix}mlp_layer1", (block.ff.net[0].proj,))
    yield LoraTarget(f"{prefix}mlp_layer2", (block.ff.net[2],))


def _adapter_targets(index: int, block: nn.Module) -> Iterator[LoraTarget]:
    prefix = f"{ADAPTER_LORA}blocks_{index}_"
    for kind in ("self_attn", "cross_attn"):
        attention = getattr(block, kind)
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield LoraTarget(f"{prefix}{kind}_{name}", (getattr(attention, name),))
    yield LoraTarget(f"{prefix}mlp_0", (block.mlp[0],))
    yield LoraTarget(f"{prefix}mlp_2", (block.mlp[2],))


def split_text(hidden: torch.Tensor, second: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the Qwen3 text mask, the T5 ids) of encode_prompts' second tensor. An empty caption's mask keeps its first
    state, which is zero (encode_prompts zeroes the padding): the adapter's cross-attention then gives 0, as a fully
    masked one does on the CPU, where some GPU attention kernels give NaN."""
    assert second is not None, "Anima's encode_prompts gives the text mask and the T5 ids"
    length = hidden.shape[1]
    mask = second[:, :length].to(hidden.device).clone()
    mask[mask.sum(dim=1) == 0, 0] = 1
    return mask, second[:, length:].to(hidden.device).long()


def latent_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The Qwen-Image VAE's per-channel latent mean and std, shaped (1, C, 1, 1) like `like`."""
    shape = (1, vae.config.z_dim, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(shape).to(like.device, like.dtype)
    std = torch.tensor(vae.config.latents_std).view(shape).to(like.device, like.dtype)
    return mean, std


def t5_tokenizer(path: str, cache_dir: str) -> Any:
    """The T5 tokenizer of the adapter's query ids: t5_tokenizer_path's folder, else google/t5-v1_1-xxl's from
    tokenizer_cache_dir (fetched once)."""
    from transformers import T5TokenizerFast

    from trainers.models.component_files import cached_tokenizer

    if path:
        if not Path(path).expanduser().is_dir():
            raise ModelLoadError(f"t5_tokenizer_path: {path} is not a folder with a T5 tokenizer")
        return T5TokenizerFast.from_pretrained(Path(path).expanduser())
    return cached_tokenizer(T5TokenizerFast, T5_TOKENIZER, cache_dir)


def adapter_tensors(path: str) -> dict[str, torch.Tensor]:
    """An LLM adapter file's tensors under `llm_adapter.` (sd-scripts' --llm_adapter_path: the adapter alone, its
    keys bare or nested as in a DiT file)."""
    from safetensors.torch import load_file

    from trainers.models.anima.reference import ADAPTER

    try:
        state = load_file(str(Path(path).expanduser()))
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"llm_adapter_path: {path} cannot be read ({err})") from None
    prefix = next((p for p in ADAPTER_PREFIXES if any(k.startswith(p) for k in state)), "")
    found = {ADAPTER + k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if f"{ADAPTER}out_proj.weight" not in found:
        raise ModelLoadError(f"llm_adapter_path: {path} has no llm_adapter.out_proj weight: it is not Anima's LLM "
                             "adapter")
    return found


ANIMA = Anima()
