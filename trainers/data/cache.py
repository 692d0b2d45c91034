"""Latent and text-encoder caches: encode once before training instead of every step.

Latents are cached as the VAE's distribution (mean and std), so a cached run samples the
same per-sample latents as an uncached one; an image's loss mask (masked_loss, alpha_mask) is
cached with them, area-averaged to the latents' size as the loss uses it. On disk they sit beside
the images in ``.atelier-cache/<image name>.<W>x<H>.safetensors``, each stamped with a key made
from the VAE's weights, the image file (size and modification time), its bucket, flips and mask
source: a run whose VAE, resolution, bucket, crop or mask settings differ rebuilds exactly the
entries that changed.
With several processes, disk caching splits the images between them.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from trainers.core.fsio import atomic_path
from trainers.data.catalog import Catalog, CatalogImage
from trainers.data.dataset import decode_sample, prepare_sample_image
from trainers.data.images import ImageLoadError

CACHE_DIR = ".atelier-cache"
FORMAT = "atelier-latents-1"
Progress = Callable[[int, int], None]  # (done, total)


class CacheWriteError(OSError):
    """A cache file could not be written (e.g. a read-only dataset folder)."""


@dataclass
class Dist:
    """The processes of a run, as far as caching needs them."""

    rank: int = 0
    world: int = 1
    barrier: Callable[[], None] = lambda: None
    gather: Callable[[Any], list[Any]] = lambda obj: [obj]

    @classmethod
    def of(cls, accelerator: Any) -> Dist:
        from accelerate.utils import gather_object

        return cls(accelerator.process_index, accelerator.num_processes, accelerator.wait_for_everyone,
                   lambda obj: gather_object([obj]))


@dataclass
class LatentEntry:
    mean: torch.Tensor
    std: torch.Tensor
    original_size: torch.Tensor  # (h, w)
    crop_top_left: torch.Tensor  # (top, left)
    target_size: torch.Tensor  # (h, w)
    mask: torch.Tensor | None = None  # (1, h, w) at the latents' size: the loss weights, None = whole image


ImageKey = tuple[Path, tuple[int, int]]  # (file, bucket): an image as it trains


class LatentCache:
    """Entries in memory, or the files they are read from (in the data-loader workers)."""

    def __init__(self, memory: dict[tuple[ImageKey, bool], LatentEntry] | None = None,
                 files: dict[ImageKey, Path] | None = None) -> None:
        self.memory = memory
        self.files = files or {}

    def get(self, image: CatalogImage, flip: bool) -> LatentEntry:
        key = (image.path, image.bucket)
        if self.memory is not None:
            return self.memory[(key, flip)]
        return _entries(load_file(self.files[key]))[flip]


def vae_fingerprint(vae: torch.nn.Module) -> str:
    """Changes whenever the VAE's weights, dtype or scaling do."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{type(vae).__name__}:{getattr(vae.config, 'scaling_factor', '')}".encode())
    for name, tensor in vae.state_dict().items():
        data = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{data.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy() if data.numel() else b"")
    return digest.hexdigest()


def cache_file(image: CatalogImage) -> Path:
    width, height = image.bucket
    return image.path.parent / CACHE_DIR / f"{image.path.name}.{width}x{height}.safetensors"


def _file_version(path: Path) -> str:
    try:
        stat = path.stat()
        return f"{stat.st_size}|{stat.st_mtime_ns}"
    except OSError:  # gone since the scan: encoding it fails and reports it
        return "missing"


def entry_key(image: CatalogImage, vae_key: str, flips: tuple[bool, ...], alpha_mask: bool = False) -> str:
    text = f"{FORMAT}|{vae_key}|{_file_version(image.path)}|{image.size}|{image.bucket}|{flips}"
    if image.mask is not None:  # entries without a mask keep the key they had before masks existed
        text += f"|mask:{image.mask}|{_file_version(image.mask)}"
    elif alpha_mask:
        text += "|mask:alpha"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def build_latent_cache(catalog: Catalog, vae: torch.nn.Module, to_disk: bool, batch_size: int = 1,
                       dist: Dist | None = None, progress: Progress | None = None,
                       workers: int = 2) -> tuple[LatentCache, dict[int, str]]:
    """Encode every image of the catalog; returns the cache and {image index: reason} of those that failed."""
    dist = dist or Dist()
    vae_key = vae_fingerprint(vae)
    flips = {i: (False, True) if catalog.subsets[img.subset].spec.flip_aug else (False,)
             for i, img in enumerate(catalog.images)}
    alpha = {i: catalog.subsets[img.subset].spec.alpha_mask for i, img in enumerate(catalog.images)}
    failures: dict[int, str] = {}
    if not to_disk:
        memory: dict[tuple[ImageKey, bool], LatentEntry] = {}
        for index, entries in _encode(catalog, list(range(len(catalog.images))), flips, alpha, vae, batch_size,
                                      failures, progress, workers):
            image = catalog.images[index]
            memory.update({((image.path, image.bucket), flip): entry for flip, entry in entries.items()})
        return LatentCache(memory=memory), failures

    keys = {i: entry_key(img, vae_key, flips[i], alpha[i]) for i, img in enumerate(catalog.images)}
    todo = [i for i, img in enumerate(catalog.images) if _stored_key(cache_file(img)) != keys[i]]
    dist.barrier()  # every process has looked before any writes
    mine = todo[dist.rank::dist.world]
    for index, entries in _encode(catalog, mine, flips, alpha, vae, batch_size, failures, progress, workers):
        _write(cache_file(catalog.images[index]), entries, keys[index])
    dist.barrier()
    for part in dist.gather(sorted(failures.items())):
        failures.update(dict(part))
    files = {(img.path, img.bucket): cache_file(img) for i, img in enumerate(catalog.images) if i not in failures}
    return LatentCache(files=files), failures


def _encode(catalog: Catalog, indices: list[int], flips: dict[int, tuple[bool, ...]], alpha: dict[int, bool],
            vae: torch.nn.Module, batch_size: int, failures: dict[int, str], progress: Progress | None, workers: int):
    """Yield (image index, {flip: entry}); images are decoded in threads while the VAE encodes."""
    by_bucket: dict[tuple[int, int], list[int]] = {}
    for index in indices:
        by_bucket.setdefault(catalog.images[index].bucket, []).append(index)
    chunks = [group[i:i + batch_size] for group in by_bucket.values() for i in range(0, len(group), batch_size)]

    def prepare(chunk: list[int]) -> list[tuple[int, bool, Any]]:
        out = []
        for index in chunk:
            image = catalog.images[index]
            try:
                pil, mask = decode_sample(image, alpha[index])
            except ImageLoadError as err:
                what = "its mask cannot" if err.path == image.mask else "cannot"
                failures[index] = f"{what} be decoded ({err.reason})"
                continue
            out += [(index, flip, prepare_sample_image(image, False, None, flip, pil, mask)) for flip in flips[index]]
        return out

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for prepared in pool.map(prepare, chunks):
            if prepared:
                pixels = torch.stack([p.pixels for _, _, p in prepared])
                with torch.no_grad():
                    dist = vae.encode(pixels.to(vae.device, vae.dtype)).latent_dist
                mean, std = dist.mean.cpu(), dist.std.cpu()
                entries: dict[int, dict[bool, LatentEntry]] = {}
                for k, (index, flip, p) in enumerate(prepared):
                    entries.setdefault(index, {})[flip] = LatentEntry(
                        mean[k].clone(), std[k].clone(), torch.tensor(p.original_size),
                        torch.tensor(p.crop_top_left), torch.tensor(p.target_size), _latent_mask(p.mask, mean.shape))
                yield from entries.items()
            done += 1
            if progress:
                progress(done, len(chunks))


def _latent_mask(mask: torch.Tensor | None, latent_shape: torch.Size) -> torch.Tensor | None:
    """A pixel mask (1, H, W) area-averaged to the latents' (h, w), as the loss would."""
    if mask is None:
        return None
    return F.interpolate(mask[None], size=tuple(latent_shape[-2:]), mode="area")[0].contiguous()


def _stored_key(path: Path) -> str | None:
    try:
        with safe_open(str(path), "pt") as fh:
            return (fh.metadata() or {}).get("key")
    except Exception:  # noqa: BLE001 - missing, half-written or foreign file: rebuild it
        return None


def _write(path: Path, entries: dict[bool, LatentEntry], key: str) -> None:
    tensors = {}
    for flip, e in entries.items():
        suffix = "_flip" if flip else ""
        tensors[f"mean{suffix}"], tensors[f"std{suffix}"] = e.mean.contiguous(), e.std.contiguous()
        tensors[f"sizes{suffix}"] = torch.stack([e.original_size, e.crop_top_left, e.target_size])
        if e.mask is not None:
            tensors[f"mask{suffix}"] = e.mask
    try:
        with atomic_path(path, durable=False) as tmp:  # a lost cache file is rebuilt: no fsync
            save_file(tensors, tmp, metadata={"key": key, "format": FORMAT})
    except OSError as err:
        raise CacheWriteError(f"cannot write the latent cache file {path} ({err.strerror or err})") from None


def _entries(tensors: dict[str, torch.Tensor]) -> dict[bool, LatentEntry]:
    out = {}
    for flip, suffix in ((False, ""), (True, "_flip")):
        if f"mean{suffix}" in tensors:
            sizes = tensors[f"sizes{suffix}"]
            out[flip] = LatentEntry(tensors[f"mean{suffix}"], tensors[f"std{suffix}"], sizes[0], sizes[1], sizes[2],
                                    tensors.get(f"mask{suffix}"))
    return out


class TextCache:
    """Text-encoder outputs per caption (captions are fixed: see CaptionOptions.is_fixed)."""

    def __init__(self, embeds: dict[str, tuple[torch.Tensor, torch.Tensor | None]]) -> None:
        self.embeds = embeds

    def get(self, caption: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.embeds[caption]


TEXT_FORMAT = "atelier-text-1"
TEXT_BATCH_SIZE = 16  # captions encoded at once on a CPU unless text_encoder_batch_size says (a GPU: by memory)


def build_text_cache(captions: list[str], encode: Callable[[list[str]], tuple[torch.Tensor, torch.Tensor | None]],
                     batch_size: int | Callable[[], int] | None = None, progress: Progress | None = None,
                     folder: Path | None = None, encoder_key: str = "",
                     prepare: Callable[[], None] | None = None) -> TextCache:
    """Each caption's outputs, encoded `batch_size` captions at a time (text_encoder_batch_size; a callable is asked
    after `prepare`, e.g. for what the device's free memory holds). With `folder`, those of an earlier run with the
    same `encoder_key` (the text encoders and every setting that changes their outputs) are read from it, and the new
    ones written there. `prepare` runs once before the first encoding (the text encoders onto the device), never
    when every caption was read from `folder`."""
    unique = sorted(set(captions))
    embeds: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    files = {c: folder / f"{_text_key(encoder_key, c)}.safetensors" for c in unique} if folder else {}
    for caption, path in files.items():
        if path.is_file():
            try:
                stored = load_file(path)
            except (OSError, ValueError, RuntimeError):  # a damaged file is encoded again
                continue
            embeds[caption] = (stored["hidden"], stored.get("pooled"))
    missing = [c for c in unique if c not in embeds]
    if missing and prepare is not None:
        prepare()
    if missing and callable(batch_size):
        batch_size = batch_size()
    size = int(batch_size or TEXT_BATCH_SIZE) if not callable(batch_size) else TEXT_BATCH_SIZE
    chunks = [missing[i:i + size] for i in range(0, len(missing), size)]
    for done, chunk in enumerate(chunks, 1):
        with torch.no_grad():
            hidden, pooled = encode(chunk)
        for k, caption in enumerate(chunk):
            embeds[caption] = (hidden[k].cpu().clone(), None if pooled is None else pooled[k].cpu().clone())
            if caption in files:
                _write_text_entry(files[caption], *embeds[caption])
        if progress:
            progress(done, len(chunks))
    return TextCache(embeds)


def _text_key(encoder_key: str, caption: str) -> str:
    return hashlib.blake2b(f"{TEXT_FORMAT}|{encoder_key}|{caption}".encode(), digest_size=16).hexdigest()


def _write_text_entry(path: Path, hidden: torch.Tensor, pooled: torch.Tensor | None) -> None:
    tensors = {"hidden": hidden.contiguous(), **({"pooled": pooled.contiguous()} if pooled is not None else {})}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            save_file(tensors, tmp)
    except OSError as err:
        raise CacheWriteError(f"cannot write {path} ({err.strerror or err})") from None
