"""Latents of clip windows, cached as image latents are (trainers/data/cache.py): the VAE's distribution (mean, std),
in memory or on disk beside the clip in ``.atelier-cache/<clip name>.<F>f<first frame>.<W>x<H>.safetensors`` (or the
dataset's cache_directory), each stamped with a key from the VAE's fingerprint, the clip (size and modification time
of the file, or of every frame of a frames folder), the window's frame numbers and the bucket: a changed clip,
window or bucket rebuilds exactly its entries.

The encoder is the family's: `encode` takes a batch of windows of one bucket, pixels (B, F, C, H, W) in [-1, 1], and
returns their latent mean and std (B, C', F', H', W'); the video family (its 3D VAE) supplies it. A family may cache
more of each window beside them (`WindowExtras`: an image-to-video family's first-frame condition), in the same file
and under the same key, which then names what those depend on too; the items carry them as `cached_<name>`. Extras
may also be made of the window's sound (`WindowExtras.sound`: a family that trains an audio stream), read from the
clip for the window's time (clip_audio.py).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from trainers.core.fsio import atomic_path
from trainers.data.cache import CACHE_DIR, CacheWriteError, Dist, _file_version, _stored_key
from trainers.data.clip_audio import ClipSound, window_sound
from trainers.data.clips import ClipError, folder_frames, iter_frames
from trainers.data.images import prepare_image
from trainers.data.video_catalog import CatalogClip, VideoCatalog
from trainers.data.video_dataset import clip_pixels

FORMAT = "atelier-clip-latents-1"
Encode = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
ClipKey = tuple[Path, tuple[int, ...], tuple[int, int]]  # (clip, frames, bucket): a window as it trains
_STORED = "extra."  # its name in the cache file


@dataclass(frozen=True)
class WindowExtras:
    """What a family caches of each window beside its latents: `encode` takes the window's pixels (B, F, C, H, W) in
    [-1, 1] and returns named tensors (B, ...); `key` is what they depend on besides the window (their encoders'
    weights). `sound` given, `encode_sound` takes the window's waveform (B, channels, samples) and whether its clip
    has sound (B,) and returns more named tensors."""

    key: str
    encode: Callable[[torch.Tensor], dict[str, torch.Tensor]]
    sound: ClipSound | None = None
    encode_sound: Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]] | None = None

    def of_window(self, clip: CatalogClip, pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        """The extras of one window (B = 1) of its pixels (1, F, C, H, W) and, when asked, its sound."""
        out = self.encode(pixels)
        if self.sound is not None and self.encode_sound is not None:
            wave, present = window_sound(clip, self.sound)
            out.update(self.encode_sound(torch.from_numpy(wave)[None], torch.tensor([float(present)])))
        return out


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


def clip_entry_key(clip: CatalogClip, vae_key: str, extras_key: str = "") -> str:
    text = f"{FORMAT}|{vae_key}|{clip_version(clip.path)}|{clip.info.size}|{clip.frames}|{clip.bucket}"
    text += f"|{extras_key}" if extras_key else ""  # the entries without extras keep the key they had
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def clip_cache_file(clip: CatalogClip, cache_directory: Path | None = None) -> Path:
    folder = cache_directory if cache_directory is not None else clip.path.parent / CACHE_DIR
    width, height = clip.bucket
    return folder / f"{clip.path.name}.{len(clip.frames)}f{clip.frames[0]}.{width}x{height}.safetensors"


def window_key(clip: CatalogClip) -> ClipKey:
    return (clip.path, clip.frames, clip.bucket)


Entry = dict[str, torch.Tensor]  # "mean", "std" and the extras' names


class ClipLatentCache:
    """Entries in memory, or the files they are read from."""

    def __init__(self, memory: dict[ClipKey, Entry] | None = None, files: dict[ClipKey, Path] | None = None) -> None:
        self.memory = memory
        self.files = files or {}

    def entry(self, clip: CatalogClip) -> Entry:
        """The window's latent mean and std, and its extras by their own names."""
        if self.memory is not None:
            return dict(self.memory[window_key(clip)])
        tensors = load_file(str(self.files[window_key(clip)]))
        return {name.removeprefix(_STORED): tensor for name, tensor in tensors.items()}

    def get(self, clip: CatalogClip) -> tuple[torch.Tensor, torch.Tensor]:
        entry = self.entry(clip)
        return entry["mean"], entry["std"]


def build_clip_latent_cache(catalog: VideoCatalog, encode: Encode, vae_key: str, to_disk: bool,
                            dist: Dist | None = None, extras: WindowExtras | None = None
                            ) -> tuple[ClipLatentCache, dict[int, str]]:
    """Encode every window, one at a time (windows differ in length), each clip decoded once for all its windows;
    returns the cache and {window index: reason} of those that failed to decode. On disk only windows whose key
    changed are encoded, and several processes split the clips between them. `extras`: what else each entry holds."""
    dist = dist or Dist()
    failures: dict[int, str] = {}
    memory: dict[ClipKey, Entry] = {}
    paths = {i: clip_cache_file(c, catalog.datasets[c.dataset].cache_directory) for i, c in enumerate(catalog.clips)}
    extras_key = extras.key if extras is not None else ""
    keys = {i: clip_entry_key(c, vae_key, extras_key) for i, c in enumerate(catalog.clips)} if to_disk else {}
    todo: dict[Path, list[int]] = {}
    for index, clip in enumerate(catalog.clips):
        if not to_disk or _stored_key(paths[index]) != keys[index]:
            todo.setdefault(clip.path, []).append(index)
    clips = list(todo)
    if to_disk:
        dist.barrier()  # every process has looked before any writes
        clips = clips[dist.rank::dist.world]
    for path in clips:
        for index, entry in _encode_clip(catalog, todo[path], encode, extras, failures):
            if to_disk:
                _write(paths[index], entry, keys[index])
            else:
                memory[window_key(catalog.clips[index])] = entry
    if not to_disk:
        return ClipLatentCache(memory=memory), failures
    dist.barrier()
    for part in dist.gather(sorted(failures.items())):
        failures.update(dict(part))
    return ClipLatentCache(files={window_key(c): paths[i] for i, c in enumerate(catalog.clips)
                                  if i not in failures}), failures


def _encode_clip(catalog: VideoCatalog, windows: list[int], encode: Encode, extras: WindowExtras | None,
                 failures: dict[int, str]) -> Iterator[tuple[int, Entry]]:
    """(window, its entry) of each window of one clip. The clip is decoded once; a frame is resized to its bucket
    when it arrives and kept only while a window still to encode takes it."""
    def encoded(index: int, pixels: torch.Tensor) -> tuple[int, Entry]:
        with torch.no_grad():
            mean, std = encode(pixels[None])
            more = extras.of_window(catalog.clips[index], pixels[None]) if extras is not None else {}
            entry = {"mean": mean, "std": std, **more}
        return index, {name: tensor[0].detach().cpu().contiguous() for name, tensor in entry.items()}

    first = catalog.clips[windows[0]]
    if first.is_image:
        try:
            yield encoded(windows[0], clip_pixels(first))
        except ClipError as err:
            failures[windows[0]] = err.reason
        return
    pending = sorted(windows, key=lambda i: catalog.clips[i].frames[-1])
    kept: dict[tuple[int, tuple[int, int]], torch.Tensor] = {}
    buckets = {catalog.clips[i].bucket for i in windows}
    try:
        for number, frame in iter_frames(first.path, sorted({f for i in windows for f in catalog.clips[i].frames})):
            image = Image.fromarray(frame)
            kept.update({(number, b): prepare_image(image, *b).pixels for b in buckets})
            while pending and catalog.clips[pending[0]].frames[-1] == number:
                index = pending.pop(0)
                clip = catalog.clips[index]
                yield encoded(index, torch.stack([kept[(f, clip.bucket)] for f in clip.frames]))
            start = min((catalog.clips[i].frames[0] for i in pending), default=number + 1)
            kept = {k: v for k, v in kept.items() if k[0] >= start}
    except ClipError as err:
        failures.update({i: err.reason for i in pending})


def _write(path: Path, entry: Entry, key: str) -> None:
    tensors = {name if name in ("mean", "std") else _STORED + name: tensor for name, tensor in entry.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, durable=False) as tmp:  # a lost cache file is rebuilt: no fsync
            save_file(tensors, tmp, metadata={"key": key, "format": FORMAT})
    except OSError as err:
        raise CacheWriteError(f"cannot write the latent cache file {path} ({err.strerror or err})") from None
