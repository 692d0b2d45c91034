"""sd-scripts' fine-tuning metadata: one JSON (`in_json`, a subset's `metadata_file`) holding every image's caption.

    {"img001": {"caption": "a dog on a beach", "tags": "dog, beach, sunny", "image_size": [768, 512]}, ...}

or JSON Lines, one `{"image_path": ..., "caption": ..., "tags": ...}` a line. A key is an image path, absolute or
relative to the image folder, with or without its extension (sd-scripts' merge_captions_to_metadata.py writes the
stem). The caption is `caption`, then `tags` after caption_separator, as sd-scripts joins them. Torch-free.

kohya_ss's finetune tab runs merge_captions_to_metadata.py before each run: the caption file beside each image of the
folder replaces that image's `caption` in the file (created when missing). `captions_from` does the same in memory.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.data.kohya_folders import IMAGE_EXTENSIONS, DatasetLayoutError, ImageItem, scan_image_folder
from trainers.data.text_files import decode_text


def read_metadata_file(path: Path | None, image_dir: Path | None, separator: str, field: str,
                       wildcard: bool = False, captions_from: str | None = None,
                       strict: bool = False) -> tuple[list[ImageItem], list[str]]:
    """(images with their captions, warnings naming the entries skipped). Raises DatasetLayoutError when the file
    cannot be read at all.

    `captions_from`: a caption extension; the captions of image_dir's images are read from their caption files and
    merged into the file's entries (`path` may be None: the captions alone), as merge_captions_to_metadata.py does.
    """
    entries = _entries(path, field) if path is not None else {}
    warnings: list[str] = []
    if captions_from is not None:
        entries = _merge_caption_files(entries, image_dir, captions_from, field, wildcard, strict, warnings)
    images: list[ImageItem] = []
    missing: list[str] = []
    for key, record in entries.items():
        found = _image(key, image_dir)
        if found is None:
            missing.append(key)
            continue
        caption = _caption(record, separator, wildcard)
        images.append(ImageItem(found, caption, bool(caption)))
    if missing:
        where = f"in {image_dir}" if image_dir else "(give the image folder as train_data_dir or image_dir)"
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        warnings.append(f"{path.name}: {len(missing)} of {len(entries)} image(s) not found {where}; skipped: {shown}")
    return images, warnings


def named_images(path: Path, image_dir: Path | None, field: str) -> list[Path]:
    """The image paths a metadata file's keys name, without looking at the images: an absolute key as it is, others
    under image_dir (what the GUI checks against its allowed folders). Raises DatasetLayoutError as the reader."""
    keys = [Path(key).expanduser() for key in _entries(path, field)]
    return [key if key.is_absolute() or image_dir is None else image_dir / key for key in keys]


def _merge_caption_files(entries: dict[str, dict[str, Any]], image_dir: Path | None, caption_extension: str,
                         field: str, wildcard: bool, strict: bool, warnings: list[str]) -> dict[str, dict[str, Any]]:
    """`entries` with each image of `image_dir` given the caption of its caption file (other fields kept), keyed as
    the file keys it (full path or name without extension), else by its name in image_dir."""
    if image_dir is None:
        raise DatasetLayoutError(f"{field}: the captions are read beside the images, and train_data_dir (the folder "
                                 "holding them) is not set", field="train_data_dir")
    folder, scan_warnings = scan_image_folder(image_dir, 1, "", caption_extension, field="train_data_dir",
                                              all_lines=wildcard, strict=strict)
    warnings.extend(scan_warnings)
    merged = dict(entries)
    for item in folder.images:
        key = next((k for k in (str(item.path), item.path.stem, item.path.name) if k in merged), item.path.name)
        merged[key] = {**merged.get(key, {}), "caption": item.caption}
    return merged


def _entries(path: Path, field: str) -> dict[str, dict[str, Any]]:
    def fail(why: str) -> DatasetLayoutError:
        return DatasetLayoutError(f"{field}: {path}: {why}", field=field, path=path)

    try:
        text = decode_text(path.read_bytes())
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise fail(f"is not UTF-8 text ({err}): save it as UTF-8") from None
    try:
        if path.suffix.lower() == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            data = {str(r["image_path"]): r for r in rows if isinstance(r, dict) and "image_path" in r}
        else:
            data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise fail(f"is not valid JSON ({err})") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise fail('expected {"<image>": {"caption": ..., "tags": ...}, ...} as sd-scripts\' metadata files hold')
    if not data:
        raise fail("holds no images")
    return data


def _image(key: str, image_dir: Path | None) -> Path | None:
    """The image file a metadata key names (sd-scripts: an absolute path, else relative to image_dir)."""
    base = Path(key).expanduser()
    if not base.is_absolute():
        if image_dir is None:
            return None
        base = image_dir / key
    candidates = [base] + [base.with_name(base.name + ext) for ext in sorted(IMAGE_EXTENSIONS)]
    candidates += [base.with_name(base.name + ext.upper()) for ext in sorted(IMAGE_EXTENSIONS)]
    return next((c for c in candidates if c.suffix.lower() in IMAGE_EXTENSIONS and c.is_file()), None)


def _caption(record: dict[str, Any], separator: str, wildcard: bool) -> str:
    caption = str(record.get("caption") or "")
    tags = record.get("tags")
    tags = ", ".join(map(str, tags)) if isinstance(tags, list) else str(tags or "")
    if not tags:
        return caption
    if wildcard:  # each line of the caption gets the tags
        tags = tags.replace("\n", separator)
        lines = [line for line in caption.split("\n") if line.strip()] or [""]
        return "\n".join(f"{line}{separator}{tags}" if line else tags for line in lines)
    return f"{caption}{separator}{tags}" if caption else tags
