"""A tiny random-init Anima in its published split files (tests): the DiT with its LLM adapter under `net.` (two
blocks, 16 latent channels and the padding-mask channel, two adapter blocks), a two-layer Qwen3 in ComfyUI's
text_encoders layout (`model.layers...`), a 16-channel Qwen-Image VAE with the published latent statistics, and a
tokenizer_cache_dir holding character-level Qwen3 and T5 tokenizers under their hub ids."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.anima.rules import T5_TOKENIZER
from trainers.models.flow_rules import Part

QWEN_WIDTH = 32  # the tiny Qwen3's width: the adapter's source


def build_tiny_anima(folder: Path, seed: int = 0) -> dict[str, str]:
    """Write the tiny model's files under `folder`; its options (pretrained_model_name_or_path, text_encoder, ae,
    tokenizer_cache_dir) as a run names them."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model, T5TokenizerFast

    from trainers.models.anima import reference
    from trainers.models.anima.rules import ANIMA
    from trainers.models.anima.transformer import AnimaTransformer
    from trainers.models.flow_checkpoint import tokenizer_id
    from trainers.models.qwen_image.tiny import tiny_qwen_vae
    from trainers.models.tiny_flow import write_tiny_t5_tokenizer
    from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

    torch.manual_seed(seed)
    tokenizers = folder / "tokenizers"
    qwen_part: Part = ANIMA.checkpoint_parts[0]
    write_tiny_qwen_tokenizer(tokenizers / tokenizer_id(qwen_part).replace("/", "_"))
    write_tiny_t5_tokenizer(tokenizers / T5_TOKENIZER.replace("/", "_"))
    qwen_tokenizer = AutoTokenizer.from_pretrained(tokenizers / tokenizer_id(qwen_part).replace("/", "_"))
    t5_tokenizer = T5TokenizerFast.from_pretrained(tokenizers / T5_TOKENIZER.replace("/", "_"))
    # heads 24 wide (the 3D rope splits a head into 8 + 8 + 8): the files' config is read back from the per-head norms
    transformer = AnimaTransformer(num_attention_heads=2, attention_head_dim=24, num_layers=2, text_embed_dim=32,
                                   adaln_lora_dim=8, adapter_source_dim=QWEN_WIDTH, adapter_model_dim=32,
                                   adapter_layers=2, adapter_heads=2, adapter_vocab_size=len(t5_tokenizer))
    text_encoder = Qwen3Model(Qwen3Config(
        vocab_size=len(qwen_tokenizer), hidden_size=QWEN_WIDTH, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, pad_token_id=qwen_tokenizer.pad_token_id,
        rope_theta=1000000.0, rms_norm_eps=1e-6))  # Qwen3-0.6B's, as the published config files are read with
    vae = tiny_qwen_vae(published_latents=True)
    files = {"pretrained_model_name_or_path": folder / "diffusion_models" / "anima-tiny.safetensors",
             "text_encoder": folder / "text_encoders" / "qwen_3_06b_base.safetensors",
             "ae": folder / "vae" / "qwen_image_vae.safetensors"}
    states = {"pretrained_model_name_or_path": reference.to_reference(transformer.state_dict(), transformer.config),
              "text_encoder": {f"model.{k}": v for k, v in text_encoder.state_dict().items()},
              "ae": vae.state_dict()}
    for option, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in states[option].items()}, path)
    return {**{k: str(v) for k, v in files.items()}, "tokenizer_cache_dir": str(tokenizers)}


def build_tiny_anima_file(path: Path, seed: int = 0) -> Path:
    """The tiny model as one all-in-one file (`path`.safetensors: the DiT, the Qwen3 and the VAE under ComfyUI's
    prefixes), for checks that give a model as one path; its split files and tokenizers beside it."""
    from safetensors.torch import load_file, save_file

    from trainers.models.anima.rules import ANIMA

    files = build_tiny_anima(path.with_name(path.name + "-parts"), seed)
    state = dict(load_file(files["pretrained_model_name_or_path"]))
    for part in ANIMA.checkpoint_parts:
        state.update({part.prefix + k: v for k, v in load_file(files[part.option]).items()})
    out = path.with_suffix(".safetensors")
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, out)
    return out
