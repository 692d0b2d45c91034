"""tools convert: a LoRA between key formats (kohya, diffusers/PEFT, ComfyUI: formats.py) and precisions; a model
between a diffusers folder and a single file, or to another precision. Metadata is kept (the LoRA hashes are
recomputed for the tensors written); the input is never changed."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.core.errors import ToolError
from trainers.core.fsio import atomic_dir, atomic_path
from trainers.generate.saves import is_lora_file
from trainers.loras.layers import load_weights, skeleton, stored_dtype
from trainers.loras.lora_family import FamilyGuess, FileNaming, guess_family, key_format, kohya_named
from trainers.loras.lora_fit import check_fit
from trainers.loras.lora_state import LoraFile, read_lora, refuse_existing, save_precision, write_lora
from trainers.models import ModelFiles
from trainers.models.single_file import SAVE_DTYPES, save_full_model
from trainers.tools.formats import ADAPTER_METADATA, Names, from_kohya, to_kohya
from trainers.tools.job import ToolJob
from trainers.tools.loaders import FAMILY
from trainers.tools.options import ToolConfig


def run(cfg: ToolConfig, job: ToolJob) -> Path:
    path = Path(cfg.input).expanduser()
    if path.is_file() and is_lora_file(path):
        return _lora(cfg, job, read_lora(path, "input"))
    return _model(cfg, job, path)


# ---- LoRAs -------------------------------------------------------------------------------------------------------

def _names(cfg: ToolConfig, lora: LoraFile, naming: FileNaming | None) -> Names:
    """The model that names the LoRA's modules: `model`, else its family's published architecture."""
    files = ModelFiles.from_values(cfg.values)
    if cfg.model.strip():
        return Names(skeleton(cfg.model, "model", files))
    guess = FamilyGuess((naming.family,), "its key names") if naming else guess_family(lora)
    family = guess.found
    if family is None or not (Path(family.arch_dir) / "model_index.json").exists():
        told = f"it is for {guess.text()}" if guess.families else "its family cannot be told"
        raise ToolError("model", f"{lora.path.name}: {told}, and no published architecture of it ships with Atelier: "
                        "give model (a diffusers folder or single file of its family) to name its modules")
    return Names(skeleton(str(family.arch_dir), "model", files))


def _lora(cfg: ToolConfig, job: ToolJob, read: LoraFile) -> Path:
    """A file in its family's own naming (lora_family.FileNaming) is converted from kohya's names, as it reads."""
    lora, naming = kohya_named(read)
    source = key_format(lora.modules)
    target = (FAMILY if naming else source) if cfg.to == "same" else cfg.to
    out = job.output_path(f"{lora.path.stem}-{target}.safetensors")
    refuse_existing(out)
    metadata = dict(lora.metadata)
    if target == FAMILY:
        tensors = read.tensors
    elif source == target:
        tensors = lora.tensors
    elif target == "musubi":
        tensors = _musubi(lora)
    else:
        names = _names(cfg, lora, naming)
        job.progress("renaming", 0, 1)
        modules, unknown = to_kohya(lora, names, "input")
        if unknown:
            raise ToolError("input", f"{len(unknown)} of its modules name no layer of the model (e.g. {unknown[0]}): "
                            "is it a LoRA of another family? Give model (the model it was trained on)")
        misfit = check_fit(lora, modules, names.model, names.targets)
        if misfit is not None:
            raise ToolError("input", misfit + " (give model: the model it was trained on)")
        tensors, extra = from_kohya(modules, target, names, "input")
        if source == "diffusers":  # the header entries only diffusers reads go with its key names
            metadata.pop(ADAPTER_METADATA, None)
            if metadata.get("format") == "pt":
                metadata.pop("format")
        metadata.update(extra)
    write_lora(out, tensors, metadata, save_precision(cfg.save_precision, lora.dtype()))
    job.wrote(out, "lora")
    dtype = str(save_precision(cfg.save_precision, lora.dtype())).removeprefix("torch.")
    was = naming.text() if naming else f"{source} keys"
    now = naming.text() if naming and target == FAMILY else f"{target} keys"
    job.report(f"Converted {lora.path.name}", f"Wrote `{out}`: {was} -> {now}, {dtype}.",
               {"output": str(out), "from": FAMILY if naming else source, "to": target, "dtype": dtype})
    return out


def _musubi(lora: LoraFile) -> dict[str, torch.Tensor]:
    """A kohya-named LoRA in musubi-tuner's names where its family's differ (Z-Image's q, k, v apart)."""
    family = guess_family(lora).found
    try:
        tensors = family.lora_in_musubi_names(dict(lora.tensors)) if family is not None else None
    except ValueError as err:
        raise ToolError("input", str(err)) from None
    if key_format(lora.modules) != "kohya" or tensors is None:
        raise ToolError("to", f"{lora.path.name}: `musubi` is musubi-tuner's Z-Image layout (q, k, v apart), for a "
                        "Z-Image LoRA in kohya's names; musubi-tuner reads the other families' LoRAs as kohya writes "
                        "them: convert to kohya")
    return tensors


# ---- models ------------------------------------------------------------------------------------------------------

def _model(cfg: ToolConfig, job: ToolJob, path: Path) -> Path:
    is_file = path.is_file()
    target = ("single_file" if is_file else "diffusers") if cfg.to == "same" else cfg.to
    stem = path.stem if is_file else path.name
    dtype = stored_dtype(path) if cfg.save_precision == "auto" else SAVE_DTYPES[cfg.save_precision]
    suffix = str(dtype).removeprefix("torch.").replace("float", "fp")
    out = job.output_path(f"{stem}-{suffix}" + (".safetensors" if target == "single_file" else ""))
    refuse_existing(out)
    if (target == "single_file") == is_file:  # the same layout: every tensor cast, nothing renamed
        _cast_copy(path, out, dtype, job)
    else:
        job.progress("loading the model", 0, 1)
        model = load_weights(str(path), "input", ModelFiles.from_values(cfg.values))
        job.progress("saving", 0, 1)
        out = save_full_model(model, out, as_diffusers=target == "diffusers", as_single_file=target == "single_file",
                              dtype=dtype)[0]
    job.wrote(out, "model")
    job.report(f"Converted {path.name}", f"Wrote `{out}`: {target.replace('_', ' ')}, {suffix}.",
               {"output": str(out), "to": target, "dtype": suffix})
    return out


def _cast_file(source: Path, out: Path, dtype: torch.dtype) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(source), framework="pt") as handle:
        metadata = handle.metadata() or {}
        tensors = {k: (t.to(dtype) if t.is_floating_point() else t).contiguous()
                   for k in handle.keys() for t in (handle.get_tensor(k),)}
    save_file(tensors, out, metadata=metadata)


def _cast_copy(path: Path, out: Path, dtype: torch.dtype, job: ToolJob) -> None:
    """A single file or a diffusers folder with every floating tensor in `dtype` (configs and the rest copied)."""
    import shutil

    if path.is_file():
        if path.suffix.lower() != ".safetensors":
            raise ToolError("input", f"{path.name}: a .ckpt is converted to a diffusers folder or a .safetensors file "
                            "(to = diffusers, or single_file)")
        with atomic_path(out) as tmp:
            _cast_file(path, tmp, dtype)
        return
    files = [f for f in sorted(path.rglob("*")) if f.is_file()]
    with atomic_dir(out) as tmp:
        for done, file in enumerate(files, start=1):
            target = tmp / file.relative_to(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            if file.suffix == ".safetensors":
                _cast_file(file, target, dtype)
            else:
                shutil.copy2(file, target)
            job.progress("converting", done, len(files))
