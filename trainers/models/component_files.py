"""Model components given as files of their own, as sd-scripts takes them for FLUX (`clip_l`, `t5xxl`, `ae`) and
musubi-tuner for Z-Image (`text_encoder`): a CLIP, T5 or language-model text encoder in transformers' layout, an
autoencoder in the original (LDM) layout, and the tokenizers such files lack. Each architecture is read from the
file's tensor shapes (a language model's rope and norms from its published config); nothing is fetched but a
tokenizer that is neither vendored nor in `tokenizer_cache_dir` (as sd-scripts does).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainers.models.base import ModelLoadError
from trainers.models.reference_layout import count

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part
    from trainers.models.single_file.checkpoint import Checkpoint

CLIP_HEAD_WIDTH = 64  # CLIP ViT-L/G's attention heads are 64 wide; the head count is not in the weights


def component(ckpt: "Checkpoint", prefix: str, separate: str, what: str, option: str) -> dict[str, torch.Tensor]:
    """One component's tensors: from the model file under `prefix` when it holds them (all-in-one checkpoints),
    else from the file the `option` names."""
    from trainers.models.single_file.checkpoint import open_checkpoint

    if any(k.startswith(prefix) for k in ckpt.shapes):
        source, state = ckpt.path, {k[len(prefix):]: v for k, v in ckpt.tensors(prefix).items()}
    elif separate:
        source, state = Path(separate).expanduser(), dict(open_checkpoint(separate).tensors())
    else:
        raise ModelLoadError(f"{option}: {ckpt.path.name} holds no {what}; set {option} to its .safetensors file (as "
                             "for sd-scripts)")
    if any(k.endswith("scale_weight") for k in state):
        raise ModelLoadError(f"{option}: {source.name} stores the {what} as scaled fp8 (ComfyUI's *_scaled files), "
                             "which is not read here; use its fp16 or plain fp8 file")
    return state


def fill_meta(model: nn.Module, weights: Mapping[str, torch.Tensor], dtype: torch.dtype, what: str) -> nn.Module:
    """Weights into a model built on the meta device; every parameter must get one of its shape."""
    expected = model.state_dict()
    for key, target in expected.items():
        if key not in weights:
            if target.is_meta:
                raise ModelLoadError(f"the {what} file has no weight {key!r}: is it a complete {what}?")
            continue
        if tuple(weights[key].shape) != tuple(target.shape):
            raise ModelLoadError(f"the {what} weight {key!r} has shape {tuple(weights[key].shape)}, "
                                 f"{tuple(target.shape)} expected")
    cast = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in weights.items() if k in expected}
    model.load_state_dict(cast, strict=False, assign=True)
    return model.eval()


def clip_text_encoder(state: Mapping[str, torch.Tensor], dtype: torch.dtype, with_projection: bool = False,
                      hidden_act: str = "quick_gelu") -> nn.Module:
    """A CLIP text encoder from its transformers-layout weights (`text_model.…`): CLIP-L (quick_gelu) or OpenCLIP's
    bigG (gelu). A CLIP-L file without its text projection gets the identity one, as sd-scripts gives it."""
    import transformers
    from accelerate import init_empty_weights

    weights = {k.removeprefix("text_model."): v for k, v in state.items()}
    if "embeddings.token_embedding.weight" not in weights:
        raise ModelLoadError("the CLIP text encoder file has no text_model.embeddings.token_embedding.weight: it is "
                             "not a CLIP text encoder in transformers' layout")
    vocab, hidden = weights["embeddings.token_embedding.weight"].shape
    config = transformers.CLIPTextConfig(
        vocab_size=vocab, hidden_size=hidden, num_attention_heads=max(1, hidden // CLIP_HEAD_WIDTH),
        intermediate_size=weights["encoder.layers.0.mlp.fc1.weight"].shape[0],
        num_hidden_layers=count(weights, "encoder.layers."),
        max_position_embeddings=weights["embeddings.position_embedding.weight"].shape[0],
        projection_dim=weights["text_projection.weight"].shape[0] if "text_projection.weight" in weights else hidden,
        hidden_act=hidden_act, bos_token_id=vocab - 2, eos_token_id=vocab - 1, pad_token_id=vocab - 1)
    if with_projection and "text_projection.weight" not in weights:
        weights["text_projection.weight"] = torch.eye(hidden)
    cls = transformers.CLIPTextModelWithProjection if with_projection else transformers.CLIPTextModel
    with init_empty_weights():
        model = cls(config)
    if hasattr(model, "text_model"):
        weights = {k if k.startswith("text_projection") else "text_model." + k: v for k, v in weights.items()}
    return fill_meta(model, weights, dtype, "CLIP text encoder")


def t5_encoder(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """A T5 encoder (T5-XXL v1.1 and its smaller kin) from its transformers-layout weights."""
    import transformers
    from accelerate import init_empty_weights

    weights = dict(state)
    embed = weights.get("shared.weight", weights.get("encoder.embed_tokens.weight"))
    bias = weights.get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")
    if embed is None or bias is None:
        raise ModelLoadError("the t5xxl file has no shared.weight or relative attention bias: it is not a T5 encoder "
                             "in transformers' layout")
    weights.setdefault("shared.weight", embed)
    weights.setdefault("encoder.embed_tokens.weight", embed)
    heads = bias.shape[1]
    gated = "encoder.block.0.layer.1.DenseReluDense.wi_0.weight" in weights
    d_ff = weights["encoder.block.0.layer.1.DenseReluDense." + ("wi_0" if gated else "wi") + ".weight"].shape[0]
    config = transformers.T5Config(
        vocab_size=embed.shape[0], d_model=embed.shape[1], num_heads=heads,
        d_kv=weights["encoder.block.0.layer.0.SelfAttention.q.weight"].shape[0] // heads, d_ff=d_ff,
        num_layers=count(weights, "encoder.block."), relative_attention_num_buckets=bias.shape[0],
        feed_forward_proj="gated-gelu" if gated else "relu", is_encoder_decoder=False, use_cache=False,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    with init_empty_weights():
        model = transformers.T5EncoderModel(config)
    return fill_meta(model, weights, dtype, "T5 text encoder")


def llm_text_encoder(state: Mapping[str, torch.Tensor], part: "Part", dtype: torch.dtype) -> nn.Module:
    """A language-model text encoder (Qwen3, ...) from a file in transformers' layout, as ComfyUI's text_encoders
    files hold it (`model.` before the layers; a language-model head is left out): its published config
    (`part.base_config`) with the sizes the tensor shapes tell (width, depth, heads, vocabulary)."""
    import json

    import transformers
    from accelerate import init_empty_weights

    weights = {k.removeprefix("model."): v for k, v in state.items() if not k.startswith("lm_head.")}
    attention = "layers.0.self_attn."
    if "embed_tokens.weight" not in weights or f"{attention}q_proj.weight" not in weights:
        raise ModelLoadError(f"text_encoder: the file has no model.embed_tokens / {attention}q_proj weights: it is not "
                             f"a {part.what} in transformers' layout")
    assert part.base_config is not None, "a language-model part names its published config"
    config = json.loads(part.base_config.read_text(encoding="utf-8"))
    norm = weights.get(f"{attention}q_norm.weight")  # Qwen3's per-head norm gives the head width
    head = norm.shape[0] if norm is not None else config["head_dim"]
    vocab, width = weights["embed_tokens.weight"].shape
    config.update(vocab_size=vocab, hidden_size=width, num_hidden_layers=count(weights, "layers."), head_dim=head,
                  intermediate_size=weights["layers.0.mlp.gate_proj.weight"].shape[0],
                  num_attention_heads=weights[f"{attention}q_proj.weight"].shape[0] // head,
                  num_key_value_heads=weights[f"{attention}k_proj.weight"].shape[0] // head)
    cls = getattr(transformers, part.encoder_class)
    with init_empty_weights():
        model = cls(cls.config_class(**config))
    return fill_meta(model, weights, dtype, part.what)


def autoencoder(state: Mapping[str, torch.Tensor], scaling_factor: float, shift_factor: float) -> nn.Module:
    """An AutoencoderKL (float32) from weights in the original layout (`encoder.down.…`), as FLUX's ae file."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    levels = count(state, "encoder.down.")
    if "encoder.conv_in.weight" not in state or "decoder.conv_in.weight" not in state or not levels:
        raise ModelLoadError("ae: the file has no encoder.conv_in / encoder.down / decoder.conv_in weights: it is not "
                             "an autoencoder in the original layout (as FLUX.1's ae.safetensors)")
    try:
        config = {
            "in_channels": state["encoder.conv_in.weight"].shape[1],
            "out_channels": state["decoder.conv_out.weight"].shape[0],
            "latent_channels": state["decoder.conv_in.weight"].shape[1],
            "block_out_channels": [state[f"encoder.down.{i}.block.0.conv1.weight"].shape[0] for i in range(levels)],
            "layers_per_block": count(state, "encoder.down.0.block."),
            "down_block_types": ["DownEncoderBlock2D"] * levels, "up_block_types": ["UpDecoderBlock2D"] * levels,
            "use_quant_conv": "quant_conv.weight" in state, "use_post_quant_conv": "post_quant_conv.weight" in state,
            "mid_block_add_attention": "encoder.mid.attn_1.q.weight" in state,
            "scaling_factor": scaling_factor, "shift_factor": shift_factor,
        }
        weights = convert_ldm_vae_checkpoint(dict(state), config)
        with init_empty_weights():
            model = AutoencoderKL.from_config(config)
    except (KeyError, IndexError) as err:
        raise ModelLoadError(f"ae: the file is not a complete autoencoder ({type(err).__name__}: {err})") from None
    return fill_meta(model, weights, torch.float32, "autoencoder")


def cached_tokenizer(cls: Any, model_id: str, cache_dir: str, subfolder: str = "") -> Any:
    """A tokenizer from `cache_dir`/<model_id with '/' as '_'> when it is there, else from the hub (or its cache; in
    `subfolder` of the repository), then kept in `cache_dir`: sd-scripts' tokenizer_cache_dir, so a second run needs
    no network."""
    local = Path(cache_dir).expanduser() / model_id.replace("/", "_") if cache_dir else None
    if local is not None and local.is_dir():
        return cls.from_pretrained(local)
    from huggingface_hub import snapshot_download

    within = f"{subfolder}/" if subfolder else ""
    try:  # the files first: a tokenizer class given a name it cannot find may return an empty tokenizer
        fetched = snapshot_download(model_id, allow_patterns=[f"{within}*.json", f"{within}*.model", f"{within}*.txt"])
        tokenizer = cls.from_pretrained(Path(fetched) / subfolder)
    except Exception as err:  # noqa: BLE001 - hub and conversion errors come in many types; the message matters
        where = f" or in tokenizer_cache_dir ({local})" if local else ""
        raise ModelLoadError(
            f"the {model_id} tokenizer is not on this machine{where} and could not be fetched ({type(err).__name__}: "
            f"{err}). Run once with network access and tokenizer_cache_dir set; it is kept there for offline runs"
        ) from None
    if local is not None:
        tokenizer.save_pretrained(os.fspath(local))
    return tokenizer
