"""The scores in a saved file's safetensors metadata (atelier_* keys beside sd-scripts' ss_* keys). Torch-free.

Only the header is rewritten: the tensors' bytes are copied as they are (their offsets count from the header's end),
so a tool's hash of the weights (A1111's sshs hashes) is unchanged."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from trainers.core.fsio import atomic_path

FIDELITY, LIKENESS, STEP = "atelier_score_fidelity", "atelier_score_likeness", "atelier_score_step"
BEST_SAVE, BEST_RULE, OVERFITTING = "atelier_best_save", "atelier_best_save_rule", "atelier_overfitting_from_epoch"


def score_metadata(record: dict[str, Any] | None, best: dict[str, Any] | None, rule: str,
                   overfitting: int | None) -> dict[str, str]:
    """The keys for one save: its own scores (when it has a record) and the run's pick so far."""
    out: dict[str, str] = {}
    if record is not None:
        for key, field in ((FIDELITY, "fidelity"), (LIKENESS, "likeness")):
            if record.get(field) is not None:
                out[key] = f"{record[field]:.6f}"
        out[STEP] = str(record["step"])
    if best is not None and best.get("save"):
        out[BEST_SAVE] = Path(best["save"]).name
        out[BEST_RULE] = rule
    if overfitting is not None:
        out[OVERFITTING] = str(overfitting)
    return out


def add_metadata(path: Path, keys: dict[str, str]) -> bool:
    """Write `keys` into the __metadata__ of the safetensors file `path`; False when it is not one (or has them)."""
    if path.suffix != ".safetensors" or not path.is_file() or not keys:
        return False
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
        metadata = dict(header.get("__metadata__") or {})
        if all(metadata.get(k) == v for k, v in keys.items()):
            return False
        metadata.update(keys)
        header["__metadata__"] = metadata
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        raw += b" " * (-len(raw) % 8)  # safetensors keeps the data 8-byte aligned
        with atomic_path(path) as tmp, open(tmp, "wb") as out:
            out.write(struct.pack("<Q", len(raw)))
            out.write(raw)
            fh.seek(8 + length)
            shutil.copyfileobj(fh, out, 16 << 20)
    return True
