"""A tiny random-init ERNIE-Image folder (tests), in the published layout: an ErnieImageTransformer2DModel with two
single-stream layers over 2x2 patches (patchified channels = 4 x the autoencoder's; a text projection, as the published
text width differs from the transformer's), a three-layer Mistral3Model text encoder (Ministral 3's language model
and a one-layer Pixtral tower) with a character-level tokenizer that adds Mistral's BOS, FLUX.2's AutoencoderKLFlux2
kind with batch-norm statistics that are not the identity (FLUX.2's tiny one), the published scheduler config, and
the pipeline's model_index.json (no prompt enhancer: it is optional)."""
from __future__ import annotations

import string
from pathlib import Path

import torch

from trainers.models.flux2.tiny import LATENT_CHANNELS, tiny_flux2_vae

TEXT_WIDTH = 24  # the tiny Ministral 3's hidden size (the published 3072)
SPECIAL = ("<unk>", "<s>", "</s>", "<pad>")
SCHEDULER = {"shift": 4.0}  # the published scheduler's (static shift, no dynamic shifting)


def tiny_ernie_transformer() -> "torch.nn.Module":
    """The published layout (patch 1 over patchified latents, three rope axes, QK norm) at tiny sizes. The modulation
    and the output layer, which diffusers initialises to zero (the output and every gradient would be zero), get
    small random weights as a trained model has."""
    from diffusers import ErnieImageTransformer2DModel

    transformer = ErnieImageTransformer2DModel(
        hidden_size=32, num_attention_heads=2, num_layers=2, ffn_hidden_size=64, in_channels=LATENT_CHANNELS * 4,
        out_channels=LATENT_CHANNELS * 4, patch_size=1, text_in_dim=TEXT_WIDTH, rope_axes_dim=(4, 6, 6))
    for layer in (transformer.adaLN_modulation[-1], transformer.final_linear):
        torch.nn.init.normal_(layer.weight, std=0.05)
        torch.nn.init.normal_(layer.bias, std=0.05)
    return transformer


def write_tiny_mistral_tokenizer(folder: Path) -> None:
    """A character-level tokenizer with Mistral's special tokens, adding the BOS before each text as Ministral 3's
    does, padding on the right."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL, *string.printable))}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>", padding_side="right",
                                        model_max_length=131072)
    tokenizer.save_pretrained(folder)


def tiny_ministral3(vocab_size: int, pad_token_id: int, head_dim: int = 12) -> "torch.nn.Module":
    """Mistral3Model (what ErnieImagePipeline's text_encoder is) with a three-layer language model: the pipeline
    reads its second-to-last hidden states. head_dim 128 is the published one (a single file does not tell it)."""
    from transformers import Mistral3Config, Mistral3Model

    text = {"model_type": "mistral", "vocab_size": vocab_size, "hidden_size": TEXT_WIDTH, "intermediate_size": 48,
            "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": head_dim,
            "pad_token_id": pad_token_id, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True,
            "rms_norm_eps": 1e-5, "rope_theta": 1e6}  # the published (Ministral 3 3B's, as ComfyUI reads it)
    vision = {"model_type": "pixtral", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "head_dim": 8, "image_size": 28, "patch_size": 14}
    return Mistral3Model(Mistral3Config(text_config=text, vision_config=vision, image_token_index=0,
                                        multimodal_projector_bias=False))


def with_published_groups(vae: "torch.nn.Module") -> "torch.nn.Module":
    """The tiny autoencoder with the published 32 norm groups (what an autoencoder file does not hold) instead of
    its own 8, the same weights."""
    from diffusers import AutoencoderKLFlux2

    out = AutoencoderKLFlux2.from_config({**vae.config, "norm_num_groups": 32})
    out.load_state_dict(vae.state_dict())
    return out


def build_tiny_ernie_image(folder: Path, seed: int = 0, published_widths: bool = False) -> Path:
    """Save a tiny ErnieImagePipeline to `folder`; `published_widths`: its text encoder's heads and its autoencoder's
    norm groups as published (single files do not hold them)."""
    from diffusers import ErnieImagePipeline, FlowMatchEulerDiscreteScheduler
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_mistral_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    vae = with_published_groups(tiny_flux2_vae()) if published_widths else tiny_flux2_vae()
    pipe = ErnieImagePipeline(transformer=tiny_ernie_transformer(), vae=vae,
                              text_encoder=tiny_ministral3(len(tokenizer), tokenizer.pad_token_id,
                                                           128 if published_widths else 12),
                              tokenizer=tokenizer, scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER))
    pipe.save_pretrained(folder)
    return folder
