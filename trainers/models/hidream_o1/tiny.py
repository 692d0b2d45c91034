"""A tiny random-init HiDream-O1-Image in Comfy-Org's single-file layout (tests): a two-layer Qwen3-VL decoder 32
wide (two heads of 16), a one-block vision tower (one head of the published 72), the pixel heads at their published
sizes per patch (3072 values), and a tokenizer_cache_dir holding a character-level tokenizer with Qwen's chat tokens
and HiDream's <|boi_token|> and <|tms_token|> under HiDream-ai/HiDream-O1-Image's and -Dev's ids."""
from __future__ import annotations

import string
from pathlib import Path

import torch

from trainers.models.hidream_o1.rules import REPOSITORIES

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|boi_token|>", "<|tms_token|>")


def write_tiny_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL, *string.printable))}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[])),
                                        pad_token=SPECIAL[0], eos_token=SPECIAL[2],
                                        additional_special_tokens=list(SPECIAL[1:]), padding_side="right")
    tokenizer.save_pretrained(folder)


def tiny_transformer(vocab: int, tms_token_id: int, layers: int = 2) -> torch.nn.Module:
    from trainers.models.hidream_o1.family import config_from_shapes
    from trainers.models.hidream_o1.model import HiDreamO1Transformer

    shapes = {"language_model.embed_tokens.weight": (vocab, 32),
              "language_model.layers.0.self_attn.q_norm.weight": (16,),
              f"language_model.layers.{layers - 1}.x": (), "language_model.layers.0.mlp.gate_proj.weight": (64, 32),
              "language_model.layers.0.self_attn.q_proj.weight": (32, 32),
              "language_model.layers.0.self_attn.k_proj.weight": (16, 32),
              "visual.patch_embed.proj.weight": (72, 3, 2, 16, 16), "visual.blocks.0.x": (),
              "visual.blocks.0.mlp.linear_fc1.weight": (64, 72), "visual.merger.linear_fc2.weight": (32, 72 * 4),
              "visual.pos_embed.weight": (16, 72)}
    return HiDreamO1Transformer(**config_from_shapes(shapes, "tiny"), tms_token_id=tms_token_id)


def build_tiny_hidream_o1(folder: Path, seed: int = 0, prefix: str = "", layers: int = 2) -> dict[str, str]:
    """Write the tiny model's file (its tensors under `prefix`: Comfy-Org's none, or HiDream-ai's `model.`; `layers`
    decoder layers) and its tokenizer; the options a run names them with (pretrained_model_name_or_path,
    tokenizer_cache_dir)."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    tokenizers = folder / "tokenizers"
    for repository in REPOSITORIES.values():  # full's and Dev's (a file named so reads the Dev repository's)
        write_tiny_tokenizer(tokenizers / repository.replace("/", "_"))
    local = tokenizers / REPOSITORIES["full"].replace("/", "_")
    tokenizer = AutoTokenizer.from_pretrained(local)
    transformer = tiny_transformer(len(tokenizer), tokenizer.convert_tokens_to_ids("<|tms_token|>"), layers)
    with torch.no_grad():  # the published output head starts at zero; the tiny one must say something
        torch.nn.init.normal_(transformer.final_layer2.linear.weight, std=0.02)
    path = folder / "checkpoints" / "hidream_o1_image_tiny.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({prefix + k: v.contiguous() for k, v in transformer.state_dict().items()}, path)
    return {"pretrained_model_name_or_path": str(path), "tokenizer_cache_dir": str(tokenizers)}


def build_tiny_hidream_o1_file(folder: Path, seed: int = 0) -> Path:
    """The tiny model's single file, for checks that give a model as one path (its tokenizer beside it)."""
    return Path(build_tiny_hidream_o1(folder, seed)["pretrained_model_name_or_path"])
