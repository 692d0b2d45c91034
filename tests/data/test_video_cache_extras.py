"""A family's extras of each clip window (video_cache.WindowExtras: an image-to-video family's first-frame
condition) cached beside its latents, in memory and on disk: the items and batches carry them as `cached_<name>`,
the file's key names what they depend on (a changed image encoder rebuilds the entries), and the entries of a cache
without extras keep the key they had."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.data.test_video_clips import _catalog, torch_ids  # noqa: E402
from trainers.data.video_cache import (  # noqa: E402
    WindowExtras,
    build_clip_latent_cache,
    clip_cache_file,
    clip_entry_key,
)
from trainers.data.video_dataset import ClipWindows, clip_pixels, collate_clips  # noqa: E402

TOML = '[general]\nresolution = 16\n[[datasets]]\nvideo_directory = "clips"\ntarget_frames = [5, 9]\n'


def _encode(pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    latent = pixels[:, ::4, :1, ::8, ::8].transpose(1, 2)
    return latent, torch.ones_like(latent)


def _first_frames(calls: list[int]) -> WindowExtras:
    def encode(pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        calls.append(pixels.shape[1])
        return {"first": pixels[:, 0] * 2}

    return WindowExtras("encoder-a", encode)


@pytest.mark.parametrize("to_disk", [False, True], ids=["memory", "disk"])
def test_each_windows_extras_come_back_with_its_latents(tmp_path: Path, to_disk: bool) -> None:
    catalog = _catalog(tmp_path, TOML)
    calls: list[int] = []
    cache, failures = build_clip_latent_cache(catalog, _encode, "vae", to_disk, extras=_first_frames(calls))
    assert not failures and len(calls) == len(catalog.clips)
    dataset = ClipWindows(catalog, lambda captions: [torch_ids(captions)], cache)
    index = next(i for i, s in enumerate(catalog.samples) if len(catalog.clips[s].frames) == 9)
    item = dataset[(0, index, 0)]
    clip = catalog.clips[catalog.samples[index]]
    assert "pixels" not in item and torch.equal(item["cached_first"], clip_pixels(clip)[0] * 2)
    batch = collate_clips([item, dataset[(0, index, 1)]])
    assert batch["cached_first"].shape == (2, 3, 16, 16) and batch["latent_mean"].shape == (2, 1, 3, 2, 2)


def test_the_extras_key_is_part_of_the_entries_key(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, TOML)
    clip = catalog.clips[0]
    assert clip_entry_key(clip, "vae", "encoder-a") != clip_entry_key(clip, "vae", "encoder-b")
    assert clip_entry_key(clip, "vae", "") == clip_entry_key(clip, "vae")  # caches without extras keep their keys
    calls: list[int] = []
    build_clip_latent_cache(catalog, _encode, "vae", True, extras=_first_frames(calls))
    build_clip_latent_cache(catalog, _encode, "vae", True, extras=_first_frames(calls))
    assert len(calls) == len(catalog.clips)  # nothing changed: nothing encoded again
    other = WindowExtras("encoder-b", _first_frames(calls).encode)
    cache, _ = build_clip_latent_cache(catalog, _encode, "vae", True, extras=other)
    assert len(calls) == 2 * len(catalog.clips)  # another image encoder: every entry again
    assert cache.entry(clip).keys() == {"mean", "std", "first"} and clip_cache_file(clip).is_file()
    plain, _ = build_clip_latent_cache(catalog, _encode, "vae", True)  # a cache without extras is rebuilt too
    assert plain.entry(clip).keys() == {"mean", "std"}
