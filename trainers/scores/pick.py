"""The best save and the overfitting flag from the scores of every sampled save. Torch-free.

A record is one sampling of the run (its sample images scored): {step, epoch, save, fidelity, likeness,
validation_loss}; `save` is the file saved at that step, or None when the step sampled without saving.
"""
from __future__ import annotations

from typing import Any

RULES = ("likeness_keep_fidelity", "likeness", "fidelity", "validation_loss")
OVERFIT_RUN = 2  # saves in a row whose likeness rose while their fidelity fell


def pick_best(records: list[dict[str, Any]], rule: str = "likeness_keep_fidelity",
              margin_percent: float = 5.0) -> dict[str, Any] | None:
    """The record of the best save under `rule` (records without a save are not candidates), or None.

    likeness_keep_fidelity: the highest likeness among the saves whose fidelity is at most `margin_percent` percent
    below the best fidelity; likeness / fidelity: the highest; validation_loss: the lowest (saves without one are
    left out). Ties go to the earlier save."""
    if rule not in RULES:
        raise ValueError(f"best_save_rule {rule!r} is not one of {', '.join(RULES)}")
    saves = [r for r in records if r.get("save") and r.get("fidelity") is not None and r.get("likeness") is not None]
    if rule == "validation_loss":
        with_loss = [r for r in records if r.get("save") and r.get("validation_loss") is not None]
        return min(with_loss, key=lambda r: r["validation_loss"]) if with_loss else None
    if not saves:
        return None
    if rule == "fidelity":
        return max(saves, key=lambda r: r["fidelity"])
    if rule == "likeness_keep_fidelity":
        best_fidelity = max(r["fidelity"] for r in saves)
        floor = best_fidelity - abs(best_fidelity) * margin_percent / 100.0
        saves = [r for r in saves if r["fidelity"] >= floor]
    return max(saves, key=lambda r: r["likeness"])


def overfitting_epoch(records: list[dict[str, Any]]) -> int | None:
    """The epoch of the first sampling of the first OVERFIT_RUN in a row whose likeness rose while fidelity fell
    (each against the sampling before it), or None."""
    scored = sorted((r for r in records if r.get("fidelity") is not None and r.get("likeness") is not None),
                    key=lambda r: r["step"])
    run = 0
    for index in range(1, len(scored)):
        before, now = scored[index - 1], scored[index]
        if now["likeness"] > before["likeness"] and now["fidelity"] < before["fidelity"]:
            run += 1
            if run >= OVERFIT_RUN:
                return int(scored[index - OVERFIT_RUN + 1]["epoch"])
        else:
            run = 0
    return None
