"""What a trainer computed in each timed step, counted from outside it (benchmarks/side_by_side.py's hook files):
images through the VAE's encoder, captions through the text encoders, the torch threads it stepped with, and the
LoRA layers in the file it saved. Two arms are the same work only when all four agree."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# the down (A) matrix of one LoRA layer: kohya's names (Atelier, sd-scripts), diffusers' and peft's
LORA_DOWN_SUFFIXES = ("lora_down.weight", "lora.down.weight", "lora_A.weight")


@dataclass(frozen=True)
class StepWork:
    vae_images: float  # images the VAE encoded, per step
    text_captions: float  # captions each text encoder encoded, per step
    threads: int  # torch's intra-op threads at the first step (0: not seen)
    lora_layers: int  # layers the saved LoRA wraps (0: no file found)

    def describe(self) -> str:
        return (f"VAE encode {self.vae_images:.1f} images, text encoder {self.text_captions:.1f} captions, "
                f"{self.threads or '?'} threads, {self.lora_layers or '?'} LoRA layers")

    def differences(self, other: StepWork) -> list[str]:
        """What `other` computes per step that this does not (or the other way round), in words."""
        pairs = (("VAE images", f"{self.vae_images:.1f}", f"{other.vae_images:.1f}"),
                 ("text captions", f"{self.text_captions:.1f}", f"{other.text_captions:.1f}"),
                 ("threads", str(self.threads), str(other.threads)),
                 ("LoRA layers", str(self.lora_layers), str(other.lora_layers)))
        return [f"{what} {ours} vs {theirs}" for what, ours, theirs in pairs if ours != theirs]


def encoder_rows(log: Path, start: float, end: float) -> tuple[float, float]:
    """(VAE rows, rows per text encoder) that the hook logged between `start` (excluded) and `end`, from every
    process of the run (`<log>.enc.<pid>`: lines "kind module-id rows time")."""
    vae = text = 0
    text_encoders: set[tuple[str, str]] = set()
    for file in log.parent.glob(f"{log.name}.enc.*"):
        for line in file.read_text().splitlines():
            kind, module, rows, stamp = line.split()
            if kind == "text":
                text_encoders.add((file.name, module))
            if start < float(stamp) <= end:
                vae += int(rows) if kind == "vae" else 0
                text += int(rows) if kind == "text" else 0
    return vae, text / max(len(text_encoders), 1)


def step_work(log: Path, window: list[float], output: Path) -> StepWork:
    """The work of the steps in `window` (their end times): the encoders' rows over its steps after the first."""
    steps = len(window) - 1
    vae, text = encoder_rows(log, window[0], window[-1]) if steps > 0 else (0, 0.0)
    threads = max((int(f.read_text() or 0) for f in log.parent.glob(f"{log.name}.threads.*")), default=0)
    return StepWork(vae / max(steps, 1), text / max(steps, 1), threads, lora_layers(output))


def lora_layers(output: Path) -> int:
    """The layers of the newest .safetensors LoRA in `output` (0 if none)."""
    from safetensors import safe_open

    files = sorted(output.glob("*.safetensors"), key=lambda f: f.stat().st_mtime) if output.is_dir() else []
    if not files:
        return 0
    with safe_open(files[-1], framework="pt") as f:
        return sum(key.endswith(LORA_DOWN_SUFFIXES) for key in f.keys())
