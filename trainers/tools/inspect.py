"""tools inspect: what a LoRA or model file is. A LoRA: its family, key format, network type, ranks and alphas per
block, precision, metadata (training settings, sd-scripts' sshs hashes checked, trigger words and tag frequency)
and which loaders take it with the keys each would leave out; with `model`, the keys that name none of its layers.
A model (single file or diffusers folder): its family, parts, precision and size."""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from safetensors import safe_open

from trainers.core.errors import ToolError
from trainers.core.job import REPORT_MD
from trainers.data.kohya_folders import parse_folder_name
from trainers.generate.saves import is_lora_file
from trainers.loras.layers import skeleton
from trainers.loras.lora_family import guess_family, key_format, key_style, kohya_named
from trainers.loras.lora_state import LoraFile, module_type, read_lora
from trainers.methods.lora.file_format import with_hashes
from trainers.models import ModelFiles
from trainers.models.rules import checkpoint_rules, folder_rules, read_json
from trainers.models.single_file.checkpoint import open_checkpoint
from trainers.sampling.pnginfo import lora_short_hash
from trainers.tools.blocks import BLOCKS, block_of
from trainers.tools.formats import Names, to_kohya
from trainers.tools.job import ToolJob
from trainers.tools.loaders import verdicts
from trainers.tools.loaders import FAMILY
from trainers.tools.options import ToolConfig

SHOWN_METADATA = ("ss_network_module", "ss_network_dim", "ss_network_alpha", "ss_network_args", "ss_base_model_version",
                  "ss_sd_model_name", "ss_resolution", "ss_num_epochs", "ss_epoch", "ss_steps", "ss_learning_rate",
                  "ss_unet_lr", "ss_text_encoder_lr", "ss_optimizer", "ss_lr_scheduler", "ss_mixed_precision",
                  "ss_clip_skip", "ss_num_train_images", "ss_output_name", "ss_training_comment", "modelspec.title",
                  "modelspec.architecture", "modelspec.author", "modelspec.description", "modelspec.date",
                  "modelspec.trigger_phrase", "modelspec.prediction_type")
TOP_TAGS = 20
IGNORED_SHOWN = 5


def run(cfg: ToolConfig, job: ToolJob) -> Path:
    path = Path(cfg.file).expanduser()
    if path.is_dir():
        title, (markdown, data) = f"Model folder {path.name}", _folder_report(path)
    elif is_lora_file(path):
        title, (markdown, data) = f"LoRA {path.name}", _lora_report(path, cfg, job)
    else:
        title, (markdown, data) = f"Model {path.name}", _checkpoint_report(path)
    job.report(title, markdown, data)
    return job.folder / REPORT_MD if job.folder is not None else path


# ---- LoRAs -----------------------------------------------------------------------------------------------------

def _rank(parts: dict[str, Any]) -> int | None:
    for key, dim in (("lora_down.weight", 0), ("lora_A.weight", 0), ("hada_w1_b", 0), ("lokr_w1_b", 0)):
        if key in parts:
            return int(parts[key].shape[dim])
    return None


def _group(name: str, style: str | None) -> str:
    """The block a module is in, for the ranks-per-block table."""
    found = re.match(r"lora_te(\d?)_", name)
    if found:
        return f"text encoder {found[1] or 1}"
    if style in ("sgm", "diffusers"):
        index = block_of(name, style)
        return BLOCKS[index] if index >= 0 else "other"
    if "." in name and not name.startswith("lora_"):  # a module path: its block, or its first part
        found = re.match(r"(?:diffusion_model\.|transformer\.)?(.+?)\.(\d+)\.", name) or re.match(
            r"(?:diffusion_model\.|transformer\.)?([^.]+)", name)
        return f"{found[1]} {found[2]}" if found and found.lastindex == 2 else (found[1] if found else "other")
    found = re.search(r"([a-z]+_blocks?)_(\d+)_", name) or re.match(r"([a-z_]+?)[._]", name)
    return f"{found[1]} {found[2]}" if found and found.lastindex == 2 else (found[1] if found else "other")


def _number_list(values: list[Any]) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in sorted(set(values))) or "-"


def _blocks(lora: LoraFile, style: str | None) -> list[dict[str, Any]]:
    groups: dict[str, list[tuple[int | None, float | None, str]]] = defaultdict(list)
    for name, parts in lora.modules.items():
        alpha = parts.get("alpha")
        groups[_group(name, style)].append((_rank(parts), float(alpha) if alpha is not None else None,
                                            module_type(parts)))
    rows = []
    for group, found in groups.items():
        rows.append({"block": group, "modules": len(found), "ranks": _number_list([r for r, _, _ in found if r]),
                     "alphas": _number_list([a for _, a, _ in found if a is not None]),
                     "types": ", ".join(sorted({t for _, _, t in found}))})
    order = {b: i for i, b in enumerate(BLOCKS)}
    return sorted(rows, key=lambda row: (not row["block"].startswith("text"), order.get(row["block"], 99),
                                         _natural(row["block"])))


def _natural(text: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _trigger_words(metadata: dict[str, str]) -> tuple[list[str], list[tuple[str, int]]]:
    """(the folder tokens of its kohya dataset folders, its most frequent caption tags)."""
    dirs = _json(metadata.get("ss_dataset_dirs", "")) or {}
    words = [parsed[1] for name in dirs if (parsed := parse_folder_name(Path(name).name)) and parsed[1].strip()]
    if metadata.get("modelspec.trigger_phrase"):
        words.insert(0, metadata["modelspec.trigger_phrase"])
    counts: Counter = Counter()
    for tags in (_json(metadata.get("ss_tag_frequency", "")) or {}).values():
        if isinstance(tags, dict):
            counts.update({str(t).strip(): int(n) for t, n in tags.items() if str(t).strip()})
    return list(dict.fromkeys(words)), counts.most_common(TOP_TAGS)


def _hashes(lora: LoraFile) -> dict[str, Any]:
    computed = with_hashes(lora.tensors, {k: v for k, v in lora.metadata.items() if not k.startswith("sshs_")})
    found = {key: {"stored": lora.metadata.get(key), "computed": computed[key]}
             for key in ("sshs_model_hash", "sshs_legacy_hash")}
    found["a1111_short_hash"] = lora_short_hash(lora.path)
    return found


def _lora_report(path: Path, cfg: ToolConfig, job: ToolJob) -> tuple[str, dict[str, Any]]:
    lora = read_lora(path, "file")
    job.progress("reading", 1, 3)
    kohya, naming = kohya_named(lora)
    fmt, style = (FAMILY, None) if naming else (key_format(lora.modules), key_style(lora.modules))
    guess = guess_family(lora)
    kinds = {name: module_type(parts) for name, parts in lora.modules.items()}
    dtypes = Counter(str(t.dtype).removeprefix("torch.") for t in lora.tensors.values())
    words, tags = _trigger_words(lora.metadata)
    hashes = _hashes(lora)
    job.progress("hashing", 2, 3)
    alphas = {name: round(float(p["alpha"]), 6) for name, p in lora.modules.items() if "alpha" in p}
    missing = guess.found.lora_loaders_missing if guess.found is not None else frozenset()
    loaders = verdicts({n: set(p) for n, p in lora.modules.items()}, kinds, fmt, style, alphas, missing)
    data: dict[str, Any] = {
        "file": str(path), "bytes": path.stat().st_size, "kind": "lora", "family": guess.text(),
        "key_format": fmt, "key_naming": naming.text() if naming else fmt, "modules": len(lora.modules),
        "network_types": dict(Counter(kinds.values())),
        "dtypes": dict(dtypes), "blocks": _blocks(lora, style), "trigger_words": words, "top_tags": tags,
        "hashes": hashes, "metadata": lora.metadata,
        "loaders": [{"loader": v.loader, "status": v.status, "ignored": len(v.ignored), "examples": v.ignored[:10],
                     "note": v.note} for v in loaders],
    }
    if cfg.model.strip():
        data["model_check"] = _model_check(kohya, cfg, guess.found)
    job.progress("checking", 3, 3)
    return _lora_markdown(data), data


def _model_check(lora: LoraFile, cfg: ToolConfig, guessed: Any) -> dict[str, Any]:
    model = skeleton(cfg.model, "model", ModelFiles.from_values(cfg.values))
    _, unknown = to_kohya(lora, Names(model), "file")
    found: dict[str, Any] = {"model": cfg.model, "family": model.family.title, "unknown_modules": unknown}
    if guessed is not None and guessed.name != model.family.name:
        found["family_mismatch"] = f"the LoRA is for {guessed.title}, the model is {model.family.title}"
    return found


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return ""


def _cell(value: object, limit: int = 300) -> str:
    """A value from the file (its metadata is anyone's text) as plain text in a Markdown line or table cell."""
    text = " ".join(str(value).split())[:limit]
    return re.sub(r"([\\`*_\[\]|<>#~$])", r"\\\1", text)


def _lora_markdown(data: dict[str, Any]) -> str:
    meta = data["metadata"]
    types = ", ".join(f"{t} ({n})" for t, n in data["network_types"].items())
    lines = [f"**Family:** {data['family']} · **key format:** {data['key_naming']} · **{data['modules']} modules:** "
             f"{types} · **precision:** {', '.join(f'{d} ({n})' for d, n in data['dtypes'].items())} · "
             f"{_size(data['bytes'])}", ""]
    check = data.get("model_check")
    if check:
        unknown = check["unknown_modules"]
        lines.append(f"**Against {check['model']}** ({check['family']}): " + (
            f"{len(unknown)} modules name none of its layers, e.g. `{unknown[0]}`" if unknown else
            "every module names one of its layers") + (f" — {check['family_mismatch']}" if "family_mismatch" in check
                                                       else ""))
        lines.append("")
    lines += ["| loader | loads it | keys it leaves out | note |", "|---|---|---|---|"]
    for v in data["loaders"]:
        more = " …" if v["ignored"] > IGNORED_SHOWN else ""
        shown = ", ".join(f"`{k}`" for k in v["examples"][:IGNORED_SHOWN]) + more
        note = v["note"] if v["status"] != "yes" else ""
        lines.append(f"| {v['loader']} | {v['status']} | {v['ignored']}{': ' + shown if shown else ''} | {note} |")
    lines += ["", "| block | modules | ranks | alphas | type |", "|---|---|---|---|---|"]
    lines += [f"| {b['block']} | {b['modules']} | {b['ranks']} | {b['alphas']} | {b['types']} |"
              for b in data["blocks"]]
    hashes = data["hashes"]
    lines += ["", "**Hashes:** " + "; ".join(
        f"{k} {v['stored'] or '(none)'}" + ("" if v["stored"] in (None, v["computed"]) else
                                            f" (the tensors or ss_* metadata changed since: now {v['computed']})")
        for k, v in hashes.items() if isinstance(v, dict)) + f"; A1111 short hash {hashes['a1111_short_hash']}"]
    if data["trigger_words"]:
        lines += ["", f"**Trigger words** (dataset folders): {_cell(', '.join(data['trigger_words']))}"]
    if data["top_tags"]:
        lines += ["", "**Most frequent tags:** " + _cell(", ".join(f"{t} ({n})" for t, n in data["top_tags"]))]
    shown = [(k, meta[k]) for k in SHOWN_METADATA if meta.get(k) not in (None, "", "None")]
    if shown:
        lines += ["", "| metadata | value |", "|---|---|"] + [f"| `{k}` | {_cell(v)} |" for k, v in shown]
    return "\n".join(lines)


# ---- models ----------------------------------------------------------------------------------------------------

def _dtypes_of(path: Path) -> Counter:
    if path.suffix.lower() != ".safetensors":
        return Counter()
    with safe_open(str(path), framework="pt") as handle:
        return Counter(handle.get_slice(k).get_dtype() for k in handle.keys())


def _params(shapes: dict[str, tuple[int, ...]]) -> int:
    total = 0
    for shape in shapes.values():
        count = 1
        for size in shape:
            count *= size
        total += count
    return total


def _checkpoint_report(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        ckpt = open_checkpoint(path)
        rules = checkpoint_rules(ckpt.shapes, str(path))
    except Exception as err:  # noqa: BLE001 - a ModelLoadError or a file torch cannot read: named
        raise ToolError("file", str(err)) from None
    parts = [p.prefix for p in getattr(rules, "single_file_text_encoders", ())]
    parts += [p.prefix for p in getattr(rules, "checkpoint_parts", ())]
    held = {prefix: sum(k.startswith(prefix) for k in ckpt.shapes) for prefix in parts if prefix}
    data = {"file": str(path), "bytes": path.stat().st_size, "kind": "model",
            "family": rules.title if rules else "unknown (set model_family when you use it)",
            "tensors": len(ckpt.shapes), "parameters": _params(ckpt.shapes), "dtypes": dict(_dtypes_of(path)),
            "parts": {prefix: count for prefix, count in held.items()}, "metadata": ckpt.metadata}
    lines = [f"**Family:** {data['family']} · {data['tensors']} tensors, "
             f"{data['parameters'] / 1e9:.2f} B parameters · "
             f"**precision:** {', '.join(f'{d} ({n})' for d, n in data['dtypes'].items()) or 'as stored'} · "
             f"{_size(data['bytes'])}"]
    if held:
        lines.append("**Parts:** " + ", ".join(f"`{p}*` ({n} tensors)" if n else f"`{p}*` missing"
                                               for p, n in held.items()))
    lines += [f"- `{k}`: {v}" for k, v in ckpt.metadata.items() if k.startswith("modelspec.")]
    return "\n\n".join(lines), data


def _folder_report(folder: Path) -> tuple[str, dict[str, Any]]:
    try:
        rules = folder_rules(folder)
    except Exception as err:  # noqa: BLE001 - a ModelLoadError: named
        raise ToolError("file", str(err)) from None
    index = read_json(folder / "model_index.json")
    parts = {}
    for name, entry in index.items():
        files = sorted((folder / name).glob("*.safetensors")) if isinstance(entry, list) else []
        if files:
            dtypes = sum((_dtypes_of(f) for f in files), Counter())
            with safe_open(str(files[0]), framework="pt") as handle:
                shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
            parts[name] = {"class": entry[1], "files": len(files), "dtypes": dict(dtypes),
                           "parameters_first_file": _params(shapes)}
    data = {"folder": str(folder), "kind": "model folder", "family": rules.title, "parts": parts}
    lines = [f"**Family:** {rules.title} ({index.get('_class_name', '?')})", "",
             "| part | class | precision | parameters |", "|---|---|---|---|"]
    lines += [f"| {n} | {p['class']} | {', '.join(p['dtypes'])} | {p['parameters_first_file'] / 1e6:.1f} M |"
              for n, p in parts.items()]
    return "\n".join(lines), data
