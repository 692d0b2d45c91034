"""Pieces of the tiny SD3 and FLUX pipelines (tests, demo): a T5 tokenizer and encoder, and a VAE with a latent shift.

Built offline in code like trainers/models/tiny.py: the T5 tokenizer is a character-level Unigram model (every
printable character, alone and after a word start) saved as a transformers T5 tokenizer, so loading it never
reaches the hub.
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Any

T5_SPECIAL = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in T5's own vocabulary
WORD_START = "\u2581"  # sentencepiece's word-start mark


def write_tiny_t5_tokenizer(folder: Path, max_length: int = 512) -> None:
    """Save a character-level T5 tokenizer (tokenizer.json and its config) into `folder`."""
    from transformers import T5TokenizerFast

    characters = [c for c in string.printable if not c.isspace()]
    vocab: list[tuple[str, float]] = [(token, 0.0) for token in T5_SPECIAL] + [(WORD_START, -2.0)]
    vocab += [(WORD_START + c, -1.0) for c in characters] + [(c, -1.5) for c in characters]
    tokenizer = T5TokenizerFast(vocab=vocab, extra_ids=0, model_max_length=max_length)
    tokenizer.save_pretrained(folder)


def t5_config(vocab_size: int, width: int) -> Any:
    from transformers import T5Config

    return T5Config(vocab_size=vocab_size, d_model=width, d_kv=8, d_ff=width * 2, num_layers=2, num_heads=2,
                    relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                    use_cache=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)


def tiny_shifted_vae(scaling_factor: float, shift_factor: float) -> Any:
    """A tiny AutoencoderKL with 4 latent channels whose latents are shifted and scaled, as SD3's and FLUX's are."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(32, 64),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        sample_size=64,
        scaling_factor=scaling_factor,
        shift_factor=shift_factor,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )


def write_reference_files(model_dir: Path, out: Path) -> dict[str, Path]:
    """A tiny flow folder (SD3 and FLUX built with `reference_heads`, so that configs can be read back from the
    weights) as sd-scripts' and ComfyUI's users have these models: the denoiser in its family's single-file layout,
    a file for each text encoder (and the ae; SD3's VAE goes inside the model file, as Stability ships it), and a
    tokenizer_cache_dir holding the tokenizers as sd-scripts leaves it after a first run. Returns the options
    that name them."""
    import importlib

    import torch
    from safetensors.torch import save_file

    from trainers.models import load_model
    from trainers.models.convert import VAE_PREFIX, vae_to_ldm
    from trainers.models.flow_checkpoint import tokenizer_id

    model = load_model(str(model_dir), "auto", torch.float32)
    family = model.family
    out.mkdir(parents=True, exist_ok=True)
    main = {k: v for k, v in family.to_checkpoint(model, model.unet.state_dict()).items()
            if not k.startswith(VAE_PREFIX)}  # the VAE goes where checkpoint_parts say
    files: dict[str, Path] = {"pretrained_model_name_or_path": out / f"{family.name}.safetensors",
                              "tokenizer_cache_dir": out / "tokenizers"}
    encoders = iter(zip(model.text_encoders, model.tokenizers))
    for part in family.checkpoint_parts:
        if part.kind == "vae":
            module = model.vae
        else:
            module, tokenizer = next(encoders)
            tokenizer.save_pretrained(files["tokenizer_cache_dir"] / tokenizer_id(part).replace("/", "_"))
        if part.reader:  # the family's own file layout of the part
            state = importlib.import_module(part.reader).file_state(part, module)
        elif part.kind == "vae":
            state = {k.removeprefix(VAE_PREFIX): v for k, v in vae_to_ldm(module.state_dict(), module.config).items()}
        else:
            state = _encoder_file_state(part.kind, module.state_dict())
        if part.option:
            files[part.option] = out / f"{part.option}.safetensors"
            save_file({k: v.contiguous() for k, v in state.items()}, files[part.option])
        else:
            main.update({part.prefix + k: v for k, v in state.items()})
    save_file({k: v.contiguous() for k, v in main.items()}, files["pretrained_model_name_or_path"])
    return files


def _encoder_file_state(kind: str, state: dict[str, Any]) -> dict[str, Any]:
    """A text encoder's weights as its own file holds them: T5 without the embedding tied to shared.weight, CLIP
    under text_model., a language model under model. (ComfyUI's text_encoders files)."""
    if kind == "t5":
        return {k: v for k, v in state.items() if k != "encoder.embed_tokens.weight"}
    if kind == "llm":
        return {f"model.{k}": v for k, v in state.items()}
    return {k if k.startswith("text_projection") else "text_model." + k.removeprefix("text_model."): v
            for k, v in state.items()}
