"""Tiny random-init FLUX.2 pipelines (tests): dev (Flux2Pipeline: a 30-layer Mistral 3 text encoder with a one-layer
Pixtral vision tower, a character-level tokenizer with Mistral's chat tokens) and klein (Flux2KleinPipeline: a 27-layer
Qwen3 text encoder), each with one double and two single blocks and a 4-channel AutoencoderKLFlux2 whose batch-norm
statistics are not the identity. The text encoders are as deep as the layers the pipelines stack (10, 20, 30 and 9,
18, 27)."""
from __future__ import annotations

import string
from pathlib import Path

import torch

from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 4
TEXT_WIDTH = 16
# Mistral's chat tokens, and FLUX.2's system message as one token (it would fill the 512 tokens character by character)
MISTRAL_CHAT = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}[SYSTEM_PROMPT]"
                "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}[/SYSTEM_PROMPT]{% else %}[INST]"
                "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}[/INST]{% endif %}{% endfor %}")


def tiny_flux2_vae(latent_channels: int = LATENT_CHANNELS) -> "torch.nn.Module":
    """FLUX.2's autoencoder kind, 32 wide, with random batch-norm statistics (ERNIE-Image and Ideogram 4 use it)."""
    from diffusers import AutoencoderKLFlux2

    vae = AutoencoderKLFlux2(block_out_channels=(32, 32), down_block_types=("DownEncoderBlock2D",) * 2,
                             up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1,
                             latent_channels=latent_channels, norm_num_groups=8, sample_size=64,
                             mid_block_add_attention=False)
    generator = torch.Generator().manual_seed(1)
    vae.bn.running_mean.copy_(torch.randn(vae.bn.num_features, generator=generator) * 0.2)
    vae.bn.running_var.copy_(torch.rand(vae.bn.num_features, generator=generator) + 0.5)
    return vae


def tiny_flux2_transformer(guidance_embeds: bool) -> "torch.nn.Module":
    from diffusers import Flux2Transformer2DModel

    return Flux2Transformer2DModel(in_channels=LATENT_CHANNELS * 4, num_layers=1, num_single_layers=2,
                                   attention_head_dim=16, num_attention_heads=2, joint_attention_dim=3 * TEXT_WIDTH,
                                   timestep_guidance_channels=32, axes_dims_rope=(4, 4, 4, 4),
                                   guidance_embeds=guidance_embeds)


def write_tiny_mistral_tokenizer(folder: Path) -> None:
    """A character-level tokenizer with Mistral's special and chat tokens (Flux2Pipeline's tokenizer)."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    special = ("<pad>", "<s>", "</s>", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[INST]", "[/INST]", SYSTEM_MESSAGE)
    vocab = {token: i for i, token in enumerate((*special, *string.printable))}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[])),
                                        pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                        additional_special_tokens=list(special[3:]), padding_side="right")
    tokenizer.chat_template = MISTRAL_CHAT
    tokenizer.save_pretrained(folder)


def tiny_mistral3(vocab_size: int, pad_token_id: int) -> "torch.nn.Module":
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    text = {"model_type": "mistral", "vocab_size": vocab_size, "hidden_size": TEXT_WIDTH, "intermediate_size": 32,
            "num_hidden_layers": 30, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
            "pad_token_id": pad_token_id}
    vision = {"model_type": "pixtral", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "head_dim": 8, "image_size": 32, "patch_size": 8}
    return Mistral3ForConditionalGeneration(Mistral3Config(text_config=text, vision_config=vision,
                                                           image_token_index=0))


def tiny_qwen3(vocab_size: int, pad_token_id: int) -> "torch.nn.Module":
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(vocab_size=vocab_size, hidden_size=TEXT_WIDTH, intermediate_size=32,
                                        num_hidden_layers=27, num_attention_heads=2, num_key_value_heads=2,
                                        head_dim=8, pad_token_id=pad_token_id))


def build_tiny_flux2(folder: Path, seed: int = 0) -> Path:
    """Save a tiny Flux2Pipeline (dev: a guidance embedding, a Mistral 3 text encoder) to `folder`."""
    from diffusers import Flux2Pipeline
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_mistral_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    pipe = Flux2Pipeline(scheduler=_scheduler(), vae=tiny_flux2_vae(),
                         text_encoder=tiny_mistral3(len(tokenizer), tokenizer.pad_token_id), tokenizer=tokenizer,
                         transformer=tiny_flux2_transformer(guidance_embeds=True))
    pipe.save_pretrained(folder)
    return folder


def build_tiny_flux2_klein(folder: Path, seed: int = 0, distilled: bool = False) -> Path:
    """Save a tiny Flux2KleinPipeline (klein base unless `distilled`: no guidance embedding, a Qwen3 text encoder)."""
    from diffusers import Flux2KleinPipeline
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    pipe = Flux2KleinPipeline(scheduler=_scheduler(), vae=tiny_flux2_vae(),
                              text_encoder=tiny_qwen3(len(tokenizer), tokenizer.pad_token_id), tokenizer=tokenizer,
                              transformer=tiny_flux2_transformer(guidance_embeds=False), is_distilled=distilled)
    pipe.save_pretrained(folder)
    return folder


def _scheduler() -> object:
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, time_shift_type="exponential")
