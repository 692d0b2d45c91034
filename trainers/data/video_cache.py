"""Latents of clip windows, cached as image latents are (trainers/data/cache.py): the VAE's distribution (mean, std),
in memory or on disk beside the clip in ``.atelier-cache/<clip name>.<F>f<first frame>.<W>x<H>.safetensors`` (or the
dataset's cache_directory), each stamped with a key from the VAE's fingerprint, the clip (size and modification time
of the file, or of every frame of a frames folder), the window's frame numbers and the bucket: a changed clip,
window or bucket rebuilds exactly its entries.

The encoder is the family's: `encode` takes a batch of windows of one bucket, pixels (B, F, C, H, W) in [-1, 1], and
returns their latent mean and std (B, C', F', H', W'); the video family (its 3D VAE) supplies it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from trainers.core.fsio import atomic_path
from trainers.data.cache import CACHE_DIR, CacheWriteError, _file_version, _stored_key
from trainers.data.clips import ClipError, folder_frames
from trainers.data.video_catalog import CatalogClip, VideoCatalog
from trainers.data.video_dataset import clip_pixels

FORMAT = "atelier-clip-latents-1"
Encode = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
ClipKey = tuple[Path, tuple[int, ...], tuple[int, int]]  # (clip, frames, bucket): a window as it trains


def clip_version(path: Path) -> str:
    """Changes when the clip changes: the file's size and mtime, or those of every frame of a frames folder."""
    if not path.is_dir():
        return _file_version(path)
    try:
        frames = folder_frames(path)
    except ClipError:
        return "missing"
    digest = hashlib.blake2b(digest_size=16)
    for frame in frames:
        digest.update(f"{frame.name}|{_file_version(frame)};".encode())
    return digest.hexdigest()


def clip_entry_key(clip: CatalogClip, vae_key: str) -> str:
    text = f"{FORMAT}|{vae_key}|{clip_version(clip.path)}|{clip.info.size}|{clip.frames}|{clip.bucket}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def clip_cache_file(clip: CatalogClip, cache_directory: Path | None = None) -> Path:
    folder = cache_directory if cache_directory is not None else clip.path.parent / CACHE_DIR
    width, height = clip.bucket
    return folder / f"{clip.path.name}.{len(clip.frames)}f{clip.frames[0]}.{width}x{height}.safetensors"


def window_key(clip: CatalogClip) -> ClipKey:
    return (clip.path, clip.frames, clip.bucket)


class ClipLatentCache:
    """Entries in memory, or the files they are read from."""

    def __init__(self, memory: dict[ClipKey, tuple[torch.Tensor, torch.Tensor]] | None = None,
                 files: dict[ClipKey, Path] | None = None) -> None:
        self.memory = memory
        self.files = files or {}

    def get(self, clip: CatalogClip) -> tuple[torch.Tensor, torch.Tensor]:
        if self.memory is not None:
            return self.memory[window_key(clip)]
        tensors = load_file(str(self.files[window_key(clip)]))
        return tensors["mean"], tensors["std"]


def build_clip_latent_cache(catalog: VideoCatalog, encode: Encode, vae_key: str, to_disk: bool,
                            ) -> tuple[ClipLatentCache, dict[int, str]]:
    """Encode every window (one at a time: windows of a clip differ in length); returns the cache and
    {window index: reason} of those that failed to decode. On disk, only windows whose key changed are encoded."""
    failures: dict[int, str] = {}
    memory: dict[ClipKey, tuple[torch.Tensor, torch.Tensor]] = {}
    files: dict[ClipKey, Path] = {}
    for index, clip in enumerate(catalog.clips):
        spec = catalog.datasets[clip.dataset]
        path = clip_cache_file(clip, spec.cache_directory)
        key = clip_entry_key(clip, vae_key)
        if to_disk and _stored_key(path) == key:
            files[window_key(clip)] = path
            continue
        try:
            pixels = clip_pixels(clip)
        except ClipError as err:
            failures[index] = err.reason
            continue
        with torch.no_grad():
            mean, std = encode(pixels[None])
        mean, std = mean[0].detach().cpu().contiguous(), std[0].detach().cpu().contiguous()
        if not to_disk:
            memory[window_key(clip)] = (mean, std)
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(path, durable=False) as tmp:
                save_file({"mean": mean, "std": std}, tmp, metadata={"key": key, "format": FORMAT})
        except OSError as err:
            raise CacheWriteError(f"cannot write the latent cache file {path} ({err.strerror or err})") from None
        files[window_key(clip)] = path
    return (ClipLatentCache(memory=memory) if not to_disk else ClipLatentCache(files=files)), failures
