"""One save's health report: the weights read back from the saved file, whether ComfyUI and diffusers load every
key of it (trainers/tools/loaders.py's predictions from the file's own keys), and the effect when renders are given.
A check that fails is a warning with its reason; one that cannot run says why, never passes silently."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.errors import ToolError
from trainers.generate.saves import is_lora_file
from trainers.health.effect import effect_warnings
from trainers.health.weights import SHOWN, WeightsCheck, check_weights, shown_names
from trainers.loras.lora_family import guess_family, key_format, key_style, kohya_named
from trainers.loras.lora_state import module_type, read_lora
from trainers.models.rules import rules_of
from trainers.tools.loaders import FAMILY, NONE, verdicts

CHECKED_LOADERS = ("ComfyUI", "diffusers")
HEALTHY, WARNINGS = "healthy", "warnings"


def check_save(path: Path, family: str | None = None, base_image: Path | None = None,
               lora_image: Path | None = None) -> dict[str, Any]:
    """The health report of the saved file `path` (a LoRA): {"verdict", "warnings", "checks": {...}}. `family`: the
    family the run trained (its name), compared with what the file says; the images: the effect check's renders."""
    report: dict[str, Any] = {"file": str(path), "checks": {}, "warnings": []}
    warnings: list[str] = report["warnings"]
    if not is_lora_file(path):
        files = sorted(path.rglob("*.safetensors")) if path.is_dir() else [path]
        bad = nonfinite_tensors(files) if files and all(f.suffix == ".safetensors" for f in files) else None
        if bad is None:
            warnings.append(f"{path.name} holds no safetensors weights this check reads: nothing checked")
        else:
            report["checks"]["weights"] = {"files": len(files), "nonfinite": bad[:SHOWN], "nonfinite_count": len(bad)}
            warnings += WeightsCheck(nonfinite=bad).warnings()
    else:
        try:
            lora = read_lora(path, "file")
        except ToolError as err:
            warnings.append(f"the saved file cannot be read back: {err}")
        else:
            weights = check_weights(lora.modules)
            report["checks"]["weights"] = {"modules": weights.modules, "nonfinite": weights.nonfinite[:SHOWN],
                                           "nonfinite_count": len(weights.nonfinite), "still": weights.still[:SHOWN],
                                           "still_count": len(weights.still), "largest_delta": weights.largest}
            warnings += weights.warnings()
            warnings += _loading(lora, family, report["checks"])
    if base_image is not None and lora_image is not None:
        try:
            diff, found = effect_warnings(base_image, lora_image)
        except (OSError, ValueError) as err:
            warnings.append(f"the effect check could not compare its renders: {err}")
        else:
            report["checks"]["effect"] = {"difference": diff, "base": str(base_image), "with_lora": str(lora_image)}
            warnings += found
    report["verdict"] = WARNINGS if warnings else HEALTHY
    return report


def nonfinite_tensors(files: list[Path]) -> list[str]:
    """The names (file: key) of the tensors holding NaN or Inf, read one at a time (a model's save is large)."""
    import torch
    from safetensors import safe_open

    bad = []
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for key in handle.keys():
                tensor = handle.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    bad.append(f"{file.name}: {key}")
    return bad


def _loading(lora: Any, family: str | None, checks: dict[str, Any]) -> list[str]:
    kohya, naming = kohya_named(lora)
    fmt, style = (FAMILY, None) if naming else (key_format(lora.modules), key_style(lora.modules))
    kinds = {name: module_type(parts) for name, parts in lora.modules.items()}
    alphas = {name: round(float(p["alpha"]), 6) for name, p in lora.modules.items() if "alpha" in p}
    total = sum(len(p) for p in lora.modules.values())
    found, warnings = {}, []
    missing = rules_of(family).lora_loaders_missing if family else frozenset()
    for verdict in verdicts({n: set(p) for n, p in lora.modules.items()}, kinds, fmt, style, alphas, missing):
        if verdict.loader not in CHECKED_LOADERS:
            continue
        found[verdict.loader] = {"status": verdict.status, "dropped": len(verdict.ignored),
                                 "examples": verdict.ignored[:SHOWN]}
        if verdict.status == NONE:  # no such program for the family: nothing a save could change
            found[verdict.loader]["note"] = verdict.note
        elif verdict.status != "yes":
            warnings.append(f"{verdict.loader} would not load {len(verdict.ignored)} of {total} keys (key format "
                            f"{fmt}), e.g. {shown_names(verdict.ignored) or '-'}"
                            + (f": {verdict.note}" if verdict.note else ""))
    guess = guess_family(kohya)
    checks["loading"] = {"key_format": fmt, "key_style": style, "loaders": found, "family": guess.text()}
    if family and guess.families and family not in {f.name for f in guess.families}:
        warnings.append(f"the file reads as a LoRA for {guess.text()}, but the run trained {family}: loaders will "
                        "apply it to the wrong model")
    return warnings
