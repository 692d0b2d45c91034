"""Options: the network a LoRA method trains (module, rank, alpha, LoCon, dropout, block-wise settings, LoRA+)."""
from __future__ import annotations

from trainers.core.options.method_sets import LORA
from trainers.core.options.schema import Option

NETWORK_MODULES = ("networks.lora", "networks.dylora", "lycoris.kohya")
# sd-scripts network_args keys that are options here too: a config's network_args entry sets the option.
NETWORK_ARG_OPTIONS = ("conv_dim", "conv_alpha", "rank_dropout", "module_dropout", "block_dims", "block_alphas",
                       "conv_block_dims", "conv_block_alphas", "down_lr_weight", "mid_lr_weight", "up_lr_weight",
                       "block_lr_zero_threshold", "loraplus_lr_ratio", "loraplus_unet_lr_ratio",
                       "loraplus_text_encoder_lr_ratio")
# network_args of sd-scripts' networks.lora_flux / lora_sd3 for LoRA modules over several layers (q, k and v):
# `split_qkv=True` trains each layer its own LoRA. Families without such modules refuse it.
FUSED_LAYER_ARGS = ("split_qkv",)


def _net(name: str, kind: str, default: object, help: str, **kw: object) -> Option:
    return Option(name, kind, default, help, "network", methods=LORA, **kw)  # type: ignore[arg-type]


OPTIONS: tuple[Option, ...] = (
    _net("network_module", "str", "networks.lora", "The network trained: 'networks.lora' (kohya's LoRA, with LoCon "
         "through conv_dim), 'networks.dylora' (DyLoRA: every rank up to network_dim usable after training), or "
         "'lycoris.kohya' (LyCORIS: LoHa, LoKr, IA3, full, DoRA, OFT... chosen with network_args, e.g. algo=loha).",
         choices=NETWORK_MODULES),
    _net("network_dim", "int", 16, "LoRA rank: higher learns more detail, makes bigger files.", min=1, max=1024),
    _net("network_alpha", "float", 8.0, "LoRA alpha: the update is scaled by alpha / dim (0 means alpha = dim).",
         min=0),
    _net("network_args", "list", [], "More arguments of the network module as key=value, exactly as sd-scripts' "
         "network_args: e.g. algo=lokr, preset=attn-mlp, factor=8, dora_wd=True for lycoris.kohya; unit=4 for "
         "networks.dylora. Keys that are options here (conv_dim, rank_dropout, block_dims, loraplus_lr_ratio...) "
         "may be given either way, not both.", advanced=True),
    _net("conv_dim", "int", None, "Rank for the ResNet 3x3 convolutions (LoCon); unset to leave them alone.",
         min=1, max=1024, nullable=True, advanced=True),
    _net("conv_alpha", "float", None, "Alpha for the LoCon convolutions (default: 1, as sd-scripts).", min=0,
         nullable=True, advanced=True),
    _net("network_weights", "str", "", "Start from the weights of an existing LoRA file (same rank unless "
         "dim_from_weights).", path="file", advanced=True),
    _net("dim_from_weights", "bool", False, "Take every module's rank and alpha from network_weights (networks.lora "
         "only), as sd-scripts does.", advanced=True),
    _net("network_train_unet_only", "bool", False, "Train the UNet LoRA only (text encoder untouched)."),
    _net("network_train_text_encoder_only", "bool", False, "Train the text-encoder LoRA only.", advanced=True),
    _net("network_dropout", "float", None, "Dropout on the LoRA's inner activations (neuron dropout) while "
         "training, e.g. 0.1; unset for none.", min=0, max=1, nullable=True, advanced=True),
    _net("rank_dropout", "float", None, "Drop each rank with this probability while training (scaled so the "
         "expected output stays the same); unset for none.", min=0, max=1, nullable=True, advanced=True),
    _net("module_dropout", "float", None, "Skip a whole LoRA module with this probability while training; unset "
         "for none.", min=0, max=1, nullable=True, advanced=True),
    _net("block_dims", "str", "", "Rank of each UNet block (networks.lora): comma-separated numbers, one a "
         "block; 0 leaves a block out.", advanced=True),
    _net("block_alphas", "str", "", "Alpha of each UNet block, with block_dims (default: network_alpha).",
         advanced=True),
    _net("conv_block_dims", "str", "", "Rank of each block's 3x3 convolutions (LoCon), like block_dims.",
         advanced=True),
    _net("conv_block_alphas", "str", "", "Alpha of each block's 3x3 convolutions, with conv_block_dims.",
         advanced=True),
    _net("down_lr_weight", "str", "", "Learning-rate multiplier of each down (input) block: comma-separated "
         "numbers (missing ones are 1) or a curve: cosine, sine, linear, reverse_linear, zeros, optionally +offset "
         "(e.g. 'sine+0.5'). A block at 0 gets no LoRA.", advanced=True),
    _net("mid_lr_weight", "str", "", "Learning-rate multiplier of the middle block(s), one number a block.",
         advanced=True),
    _net("up_lr_weight", "str", "", "Learning-rate multiplier of each up (output) block, like down_lr_weight.",
         advanced=True),
    _net("block_lr_zero_threshold", "float", None, "Block learning-rate weights at or below this count as 0 (no "
         "LoRA in that block); unset: 0.", min=0, nullable=True, advanced=True),
    _net("loraplus_lr_ratio", "float", None, "LoRA+: the up (B) matrices learn this many times faster than the "
         "down (A) ones (16 is typical); unset for plain LoRA.", min=0, nullable=True, advanced=True),
    _net("loraplus_unet_lr_ratio", "float", None, "LoRA+ ratio for the UNet only (wins over loraplus_lr_ratio).",
         min=0, nullable=True, advanced=True),
    _net("loraplus_text_encoder_lr_ratio", "float", None, "LoRA+ ratio for the text encoder(s) only.", min=0,
         nullable=True, advanced=True),
    _net("scale_weight_norms", "float", None, "Max-norm regularisation: after each step, scale down every "
         "module whose update's norm exceeds this (1.0 is typical); the progress shows how many were scaled.",
         min=0, nullable=True, advanced=True),
    _net("base_weights", "list", [], "LoRA files merged into the model before training (the new LoRA learns what "
         "they do not), one path a line.", path="file", advanced=True),
    _net("base_weights_multiplier", "list", [], "Weight of each base_weights file, in the same order (default 1).",
         advanced=True),
    _net("save_diffusers_lora", "bool", False, "Also write the final LoRA as diffusers loads it, "
         "<output_name>-diffusers/pytorch_lora_weights.safetensors (PEFT names; pipe.load_lora_weights(folder)). "
         "Families whose kohya files diffusers reads itself leave it off.", advanced=True),
)
