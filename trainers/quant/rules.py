"""The quantization and offload options' checks (torch-free: Validate shows them)."""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.memory_estimate import base_precision
from trainers.core.options import TrainConfig


def quant_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    values = cfg.values
    found = []

    def bad(name: str, message: str) -> None:
        found.append(ConfigIssue(name, message, "precision"))

    chosen = str(values.get("base_model_precision") or "none")
    if values.get("fp8_base") and chosen not in ("none", "fp8"):
        bad("fp8_base", f"asks for fp8 base weights, base_model_precision for {chosen!r}: keep one (fp8_base is "
            "base_model_precision = 'fp8')")
    if chosen == "fp8" and cfg.mixed_precision == "no":
        bad("base_model_precision", "'fp8' stores the weights in 8 bits and computes in the mixed-precision dtype: "
            "set mixed_precision to 'bf16' (or 'fp16')")
    if base_precision(values) != "none" and cfg.base_weights:
        bad("base_weights", "cannot be merged into a quantized base model: set base_model_precision = 'none' (and "
            "fp8_base off)")
    return found + offload_issues(cfg)


def offload_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """layer_offload_fraction and blocks_to_swap (LoRAs and full finetunes)."""
    values = cfg.values
    found = []
    if values.get("layer_offload_fraction") and values.get("blocks_to_swap"):
        found.append(ConfigIssue("layer_offload_fraction", "and blocks_to_swap both say how many blocks to offload: "
                                 "keep one", "precision"))
    found += [ConfigIssue(name, "saves memory only with gradient_checkpointing (without it every block's weights stay "
                          "on the GPU until the backward pass): set gradient_checkpointing = true", "precision")
              for name in ("layer_offload_fraction", "blocks_to_swap")
              if values.get(name) and not cfg.gradient_checkpointing]
    return found
