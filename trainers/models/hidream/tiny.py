"""A tiny random-init HiDream-I1 folder (tests), in the published layout: a HiDreamImageTransformer2DModel with one
dual- and one single-stream block (MoE feed-forwards of 4 routed experts, 2 active, and a shared one) over 2x2 patches
of 16 latent channels, CLIP-L and CLIP-G with projections (128 positions, as the pipeline pads them), T5 and a
two-layer Llama (LlamaForCausalLM, a character-level tokenizer with Llama 3's special tokens), FLUX.1's 16-channel
AutoencoderKL kind (three levels: 4x), and the pipeline's model_index.json. The scheduler is Full's (UniPC with flow
sigmas, shift 3) unless `variant` names Dev's or Fast's (rules.VARIANT_SHIFTS)."""
from __future__ import annotations

import json
import string
from pathlib import Path

import torch

from trainers.models.tiny import text_config, write_tiny_tokenizer
from trainers.models.tiny_flow import t5_config, write_tiny_t5_tokenizer

LATENT_CHANNELS = 16
CLIP_WIDTH = 32  # each tiny CLIP's hidden size and projection (the published 768 and 1280)
T5_WIDTH = 24  # the published 4096
LLAMA_WIDTH = 40  # the published 4096
LLAMA_LAYERS = 2  # its hidden states 1..2 feed the blocks (the published 32, repeated to 48 blocks)
TEXT_POSITIONS = 128  # the pipeline pads CLIP to 128 tokens (the published CLIPs have 248 positions)
LLAMA_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>")


def tiny_hidream_transformer() -> "torch.nn.Module":
    """The published layout (patch 2, three rope axes, MoE of 4 experts with 2 active, a caption projection per block
    from the Llama layer it reads) at tiny sizes; max_resolution 16x16 latents (the published 128x128)."""
    from diffusers import HiDreamImageTransformer2DModel

    return HiDreamImageTransformer2DModel(
        patch_size=2, in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, caption_channels=[T5_WIDTH, LLAMA_WIDTH],
        text_emb_dim=2 * CLIP_WIDTH, num_routed_experts=4, num_activated_experts=2, axes_dims_rope=(8, 4, 4),
        max_resolution=(16, 16), llama_layers=[0, 1])


def tiny_flux_vae() -> "torch.nn.Module":
    """FLUX.1's autoencoder kind (16 latent channels, its scaling and shift) with three levels (4x)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(block_out_channels=(32, 32, 32), in_channels=3, out_channels=3,
                         down_block_types=("DownEncoderBlock2D",) * 3, up_block_types=("UpDecoderBlock2D",) * 3,
                         latent_channels=LATENT_CHANNELS, sample_size=64, scaling_factor=0.3611, shift_factor=0.1159,
                         use_quant_conv=False, use_post_quant_conv=False)


def write_tiny_llama_tokenizer(folder: Path) -> None:
    """A character-level PreTrainedTokenizerFast with Llama 3's begin-of-text (added before each text, as Llama 3's
    tokenizer does) and end tokens."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*LLAMA_SPECIAL, *string.printable))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.post_processor = processors.TemplateProcessing(single=f"{LLAMA_SPECIAL[0]} $A",
                                                           special_tokens=[(LLAMA_SPECIAL[0], 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=LLAMA_SPECIAL[0],
                                        eos_token=LLAMA_SPECIAL[2], padding_side="right", model_max_length=131072)
    tokenizer.save_pretrained(folder)


def tiny_llama(vocab_size: int) -> "torch.nn.Module":
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=LLAMA_WIDTH, intermediate_size=64,
                                        num_hidden_layers=LLAMA_LAYERS, num_attention_heads=2, num_key_value_heads=2,
                                        bos_token_id=0, eos_token_id=2, tie_word_embeddings=False))


def build_tiny_hidream(folder: Path, seed: int = 0, variant: str = "full") -> Path:
    """Save a tiny HiDreamImagePipeline to `folder`; `variant` "full", "dev" or "fast" picks the published scheduler
    config (how the three are told apart)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HiDreamImagePipeline, UniPCMultistepScheduler
    from transformers import AutoTokenizer, CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    from trainers.models.hidream.rules import VARIANT_SHIFTS

    torch.manual_seed(seed)
    for name in ("tokenizer", "tokenizer_2"):
        write_tiny_tokenizer(folder / name)
        config_file = folder / name / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config_file.write_text(json.dumps({**config, "model_max_length": TEXT_POSITIONS}), encoding="utf-8")
    write_tiny_t5_tokenizer(folder / "tokenizer_3")
    write_tiny_llama_tokenizer(folder / "tokenizer_4")
    clips = [CLIPTokenizer.from_pretrained(folder / name) for name in ("tokenizer", "tokenizer_2")]
    encoders = [CLIPTextModelWithProjection(text_config(len(tok), CLIP_WIDTH, projection_dim=CLIP_WIDTH))
                for tok in clips]
    for encoder in encoders:  # 128 positions: the tokens the pipeline gives CLIP
        encoder.config.max_position_embeddings = TEXT_POSITIONS
    encoders = [CLIPTextModelWithProjection(encoder.config) for encoder in encoders]
    tokenizer_3 = T5TokenizerFast.from_pretrained(folder / "tokenizer_3")
    tokenizer_4 = AutoTokenizer.from_pretrained(folder / "tokenizer_4")
    shift = VARIANT_SHIFTS[variant]
    scheduler = (UniPCMultistepScheduler(flow_shift=shift, use_flow_sigmas=True, prediction_type="flow_prediction")
                 if variant == "full" else FlowMatchEulerDiscreteScheduler(shift=shift))
    pipe = HiDreamImagePipeline(
        scheduler=scheduler, vae=tiny_flux_vae(), text_encoder=encoders[0], tokenizer=clips[0],
        text_encoder_2=encoders[1], tokenizer_2=clips[1],
        text_encoder_3=T5EncoderModel(t5_config(len(tokenizer_3), T5_WIDTH)), tokenizer_3=tokenizer_3,
        text_encoder_4=tiny_llama(len(tokenizer_4)), tokenizer_4=tokenizer_4, transformer=tiny_hidream_transformer())
    pipe.save_pretrained(folder)
    return folder
