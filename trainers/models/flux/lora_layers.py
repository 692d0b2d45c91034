"""Which FLUX.1 layers a LoRA trains and at which rank: sd-scripts' networks.lora_flux network_args `train_blocks`
(all/double/single), `train_double_block_indices` / `train_single_block_indices` ("all", "none", "0-3,7") and the
per-type ranks `img_attn_dim`, `txt_attn_dim`, `img_mlp_dim`, `txt_mlp_dim`, `img_mod_dim`, `txt_mod_dim`,
`single_dim`, `single_mod_dim` (0 leaves that type out), and `in_dims` = [img, time, vector, guidance, txt]: the ranks
of the input layers, which train only with it. Types are matched on the kohya module name as sd-scripts matches
them, the first that fits winning; alpha stays network_alpha.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from trainers.core.errors import ConfigIssue

# (network_args key, the name parts a module of that type has), in sd-scripts' order of precedence.
TYPE_DIMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("img_attn_dim", ("img_attn",)), ("txt_attn_dim", ("txt_attn",)), ("img_mlp_dim", ("img_mlp",)),
    ("txt_mlp_dim", ("txt_mlp",)), ("img_mod_dim", ("img_mod",)), ("txt_mod_dim", ("txt_mod",)),
    ("single_dim", ("single_blocks", "linear")), ("single_mod_dim", ("modulation",)),
)
_INDEX_KEYS = {"double": "train_double_block_indices", "single": "train_single_block_indices"}
INPUT_LAYERS = ("img_in", "time_in", "vector_in", "guidance_in", "txt_in")  # in_dims' order
_INPUT = re.compile(r"lora_unet_(" + "|".join(INPUT_LAYERS) + r")(_in_layer|_out_layer)?$")
_NAME = re.compile(r"lora_unet_(double|single)_blocks_(\d+)_")


def parse_block_selection(text: str, count: int, key: str) -> list[bool]:
    """'all', 'none' / '', or indices and ranges ('0,2-4') of `count` blocks -> which are chosen."""
    text = text.strip()
    if text == "all":
        return [True] * count
    if text in ("none", ""):
        return [False] * count
    chosen = [False] * count
    for part in text.split(","):
        start, _, end = part.strip().partition("-")
        try:
            first, last = int(start), int(end or start)
        except ValueError:
            raise ValueError(f"network_args: {key}={text!r}: give 'all', 'none' or block numbers and ranges such as "
                             "'0-3,7'") from None
        if not 0 <= first <= last < count:
            raise ValueError(f"network_args: {key}={text!r}: this model has blocks 0 to {count - 1}")
        chosen[first:last + 1] = [True] * (last - first + 1)
    return chosen


def layer_dims(names: Sequence[str], args: Mapping[str, str], dim: int, blocks: Mapping[str, int]
               ) -> dict[str, int]:
    """The rank of each LoRA module `names` (0: not trained) under the network_args `args`; `blocks`: the model's
    number of double and single blocks. ValueError names a bad argument."""
    train_blocks = args.get("train_blocks", "all")
    if train_blocks not in ("all", "double", "single"):
        raise ValueError(f"network_args: train_blocks={train_blocks!r}: choose 'all', 'double' or 'single'")
    chosen = {kind: parse_block_selection(args[key], blocks[kind], key) for kind, key in _INDEX_KEYS.items()
              if key in args}
    type_dims = {}
    for key, _ in TYPE_DIMS:
        if key in args:
            try:
                type_dims[key] = int(args[key])
            except ValueError:
                raise ValueError(f"network_args: {key}={args[key]!r} is not a whole number") from None
    inputs = dict(zip(INPUT_LAYERS, parse_in_dims(args["in_dims"]) if "in_dims" in args else [0] * 5))
    dims = {}
    for name in names:
        if found := _INPUT.match(name):
            dims[name] = inputs[found[1]]
            continue
        rank = next((type_dims[key] for key, parts in TYPE_DIMS
                     if key in type_dims and all(p in name for p in parts)), dim)
        found = _NAME.match(name)
        if found:
            kind, index = found[1], int(found[2])
            if train_blocks not in ("all", kind) or (kind in chosen and not chosen[kind][index]):
                rank = 0
        dims[name] = rank
    return dims


def parse_in_dims(text: str) -> list[int]:
    """sd-scripts' in_dims: '[4,0,0,0,4]' or '4,0,0,0,4', the ranks of img, time, vector, guidance and txt in."""
    inner = text.strip().removeprefix("[").removesuffix("]")
    try:
        dims = [int(part) for part in inner.split(",")]
    except ValueError:
        dims = []
    if len(dims) != 5 or min(dims) < 0:
        raise ValueError(f"network_args: in_dims={text!r}: give five ranks (0 leaves a layer out) for img, time, "
                         "vector, guidance and txt in, e.g. in_dims=[4,0,0,0,4]")
    return dims


def issues(args: Mapping[str, str], dim: int, names: Sequence[str], blocks: Mapping[str, int]) -> list[ConfigIssue]:
    try:
        layer_dims(names, args, dim, blocks)
    except ValueError as err:
        return [ConfigIssue("network_args", str(err), "network")]
    return []
