"""Caption and data options as sd-scripts has them: wildcards, caption and secondary separators, token warmup,
color_aug, vae_batch_size, persistent workers, and the checks that go with them."""
from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trainers.core.events import EventWriter
from trainers.core.options import TrainConfig, config_from_dict
from trainers.adapters.kohya.compat import IGNORED
from trainers.data.captions import CaptionOptions, expand_wildcards, process_caption, warmup_tags
from trainers.data.catalog import build_catalog
from trainers.data.checks import dataset_issues
from trainers.data.dataset import CaptionedImages
from trainers.data.pipeline import _clock
from trainers.data.prompt_chunks import PromptFormat

from helpers import events
from image_files import save_image

TAGS = "sks dog, red collar, grass, sunny day, running, park, ball"  # 7 tags


def folder_dataset(root: Path, images: int = 4, caption: str = TAGS, name: str = "1_sks dog") -> Path:
    for i in range(images):
        save_image(root / name / f"{i}.png", (64, 64), seed=i)
        (root / name / f"{i}.txt").write_text(caption, encoding="utf-8")
    return root


def config(data: Path, **values: object) -> TrainConfig:
    return TrainConfig("lora", {"train_data_dir": str(data), "resolution": "64", "max_train_steps": 8, **values})


# ---- wildcards ---------------------------------------------------------------------------------------------------

def test_wildcards_pick_per_sample_reproducibly() -> None:
    text = "a {red|green|blue} {{literal}} fox, {small|big}"
    picks = [expand_wildcards(text, random.Random(seed)) for seed in range(60)]
    assert picks == [expand_wildcards(text, random.Random(seed)) for seed in range(60)]  # seeded: reproducible
    assert {p.split()[1] for p in picks} == {"red", "green", "blue"} and all("{literal}" in p for p in picks)
    assert {p.rsplit(", ", 1)[1] for p in picks} == {"small", "big"}
    lines = "first line, a\nsecond line, b"
    assert {expand_wildcards(lines, random.Random(seed)) for seed in range(30)} == set(lines.split("\n"))
    opts = CaptionOptions(wildcard=True, prefix="{photo|drawing} of")
    assert {process_caption("{cat|dog}", opts, random.Random(s)) for s in range(40)} == {
        "photo of cat", "photo of dog", "drawing of cat", "drawing of dog"}
    assert process_caption("{cat|dog}", CaptionOptions(), random.Random(0)) == "{cat|dog}"  # off: as written


def test_multi_line_caption_files_give_one_line_per_sample(tmp_path: Path) -> None:
    root = tmp_path / "data"
    save_image(root / "1_sks dog" / "a.png", (64, 64))
    (root / "1_sks dog" / "a.txt").write_text("sks dog, {sitting|lying}\n\nsks dog on the grass\n", encoding="utf-8")
    with_wildcards = build_catalog(config(root, enable_wildcard=True).values)
    assert with_wildcards.images[0].caption == "sks dog, {sitting|lying}\nsks dog on the grass"
    dataset = CaptionedImages(with_wildcards, lambda caps: [caps], seed=3)
    seen = {dataset.caption(epoch, 0) for epoch in range(40)}
    assert seen == {"sks dog, sitting", "sks dog, lying", "sks dog on the grass"}
    assert dataset.caption(7, 0) == CaptionedImages(with_wildcards, lambda caps: [caps], seed=3).caption(7, 0)
    assert dataset[(7, 0, 0)]["input_ids"] == [dataset.caption(7, 0)]
    warnings: list[str] = []
    plain = build_catalog(config(root).values, warnings)
    assert plain.images[0].caption == "sks dog, {sitting|lying}" and any("several lines" in w for w in warnings)


# ---- separators ------------------------------------------------------------------------------------------------

def test_secondary_separator_keeps_a_tag_together_then_becomes_the_separator() -> None:
    opts = CaptionOptions(shuffle_p=1.0, secondary_separator=";;;")
    caption = "sks dog, red;;;collar, grass, park"
    out = [process_caption(caption, opts, random.Random(seed)) for seed in range(50)]
    assert all("red,collar" in v and ";;;" not in v for v in out) and len(set(out)) > 5
    dropped = [process_caption(caption, CaptionOptions(tag_dropout_rate=0.5, secondary_separator=";;;"),
                               random.Random(seed)) for seed in range(100)]
    assert all(("red" in v) == ("collar" in v) for v in dropped)  # dropped together


def test_caption_separator_splits_the_tags() -> None:
    opts = CaptionOptions(split_on=";", shuffle_p=1.0, keep_tokens=1)
    out = [process_caption("sks dog; red, blue collar; grass", opts, random.Random(seed)) for seed in range(30)]
    assert all(v.startswith("sks dog, ") for v in out)  # rejoined with ', ', as sd-scripts does
    assert {v for v in out} == {"sks dog, red, blue collar, grass", "sks dog, grass, red, blue collar"}


def test_separators_and_warmup_come_from_the_options_and_dataset_configs(tmp_path: Path) -> None:
    data = folder_dataset(tmp_path / "data", images=1)
    opts = build_catalog(config(data, caption_separator=";", secondary_separator="::", enable_wildcard=True,
                                token_warmup_min=2, token_warmup_step=0.5).values).subsets[0].captions
    assert (opts.split_on, opts.secondary_separator, opts.wildcard) == (";", "::", True)
    assert (opts.token_warmup_min, opts.token_warmup_step) == (2, 0.5) and not opts.is_fixed
    toml = tmp_path / "dataset.toml"
    toml.write_text(f"""[general]
caption_separator = ";"
[[datasets]]
  [[datasets.subsets]]
  image_dir = "{(data / '1_sks dog').as_posix()}"
  secondary_separator = "::"
  enable_wildcard = true
  token_warmup_min = 3
  token_warmup_step = 10
  color_aug = true
""", encoding="utf-8")
    warnings: list[str] = []
    subset = build_catalog(config(data, dataset_config=str(toml)).values, warnings).subsets[0]
    assert not [w for w in warnings if "ignored" in w and "train_data_dir" not in w]
    assert (subset.captions.split_on, subset.captions.secondary_separator, subset.captions.wildcard) == (";", "::", True)
    assert (subset.captions.token_warmup_min, subset.captions.token_warmup_step, subset.spec.color_aug) == (3, 10, True)


# ---- token warmup ------------------------------------------------------------------------------------------------

def test_token_warmup_shows_the_first_tags_then_all() -> None:
    opts = CaptionOptions(token_warmup_min=1, token_warmup_step=4, keep_tokens=1)
    shown = [process_caption(TAGS, opts, random.Random(0), step=step).split(", ") for step in range(6)]
    # 6 tags after the kept one: floor(step * (6 - 1) / 4) + 1 of them until step 4
    assert [len(tags) - 1 for tags in shown] == [1, 2, 3, 4, 6, 6]
    assert shown[2] == TAGS.split(", ")[:4]  # the first ones, in order (no shuffle)
    assert warmup_tags(6, CaptionOptions(token_warmup_min=2, token_warmup_step=0.5), step=2, max_steps=8) == 4
    assert warmup_tags(6, CaptionOptions(token_warmup_min=2, token_warmup_step=0.5), step=4, max_steps=8) == 6
    assert warmup_tags(6, CaptionOptions(token_warmup_min=2), step=0, max_steps=8) == 6  # step 0: off
    shuffled = CaptionOptions(token_warmup_min=2, token_warmup_step=10, shuffle_p=1.0)
    out = {process_caption(TAGS, shuffled, random.Random(seed), step=0) for seed in range(20)}
    assert out == {"sks dog, red collar", "red collar, sks dog"}  # cut first, then shuffled


@pytest.mark.parametrize("accumulation", [1, 2])
def test_token_warmup_is_the_same_whatever_the_process_split(tmp_path: Path, accumulation: int) -> None:
    data = folder_dataset(tmp_path / "data", images=8)
    values = dict(token_warmup_min=1, token_warmup_step=6, shuffle_caption=True, train_batch_size=2,
                  keep_global_batch=True, gradient_accumulation_steps=accumulation, max_train_steps=8)
    captions, steps = {}, {}
    for processes in (1, 2):
        cfg = config(data, **values)
        catalog = build_catalog(cfg.values)
        sampler = catalog.batch_sampler(processes, cfg.seed, keep_global_batch=True)
        clock = _clock(cfg, catalog, sampler, processes)
        dataset = CaptionedImages(catalog, lambda caps: [caps], cfg.seed, clock=clock)
        keys = [(epoch, i) for epoch in range(3) for i in range(len(dataset))]
        captions[processes] = [dataset[(epoch, i, 0)]["input_ids"][0] for epoch, i in keys]
        steps[processes] = [clock.step(epoch, i) for epoch, i in keys]
    assert captions[1] == captions[2] and steps[1] == steps[2]
    # 8 samples, global batch 2: 4 batches an epoch, `accumulation` of them a step
    per_epoch = 4 // accumulation
    assert sorted(set(steps[1])) == list(range(3 * per_epoch))
    for caption, step in zip(captions[1], steps[1]):
        assert len(caption.split(", ")) == (min(7, step * 6 // 6 + 1) if step < 6 else 7)


# ---- color_aug ---------------------------------------------------------------------------------------------------

def test_color_aug_changes_pixels_deterministically_per_sample(tmp_path: Path) -> None:
    data = folder_dataset(tmp_path / "data", images=6)
    plain = CaptionedImages(build_catalog(config(data).values), lambda caps: [caps], seed=0)
    jittered = build_catalog(config(data, color_aug=True).values)
    first, again = (CaptionedImages(jittered, lambda caps: [caps], seed=0) for _ in range(2))
    changed = 0
    for epoch in range(4):
        for i in range(6):
            a, b = first[(epoch, i, 0)]["pixels"], again[(epoch, i, 0)]["pixels"]
            assert torch.equal(a, b)  # the sample's own draw: the same in every process and worker
            base = plain[(epoch, i, 0)]["pixels"]
            if not torch.equal(a, base):
                changed += 1
                assert (a - base).abs().mean() < 0.2  # a weak augmentation
    assert 2 <= changed <= 16  # about a third of 24 samples


# ---- checks, kohya keys ------------------------------------------------------------------------------------------

def test_checks_refuse_what_caching_cannot_follow(tmp_path: Path) -> None:
    def fields(**values: object) -> dict[str, str]:
        return {i.field: i.message for i in dataset_issues(config(tmp_path, **values))}

    assert "one fixed color" in fields(color_aug=True, cache_latents=True)["color_aug"]
    assert "color_aug" not in fields(color_aug=True)
    for name, value in (("token_warmup_step", 10), ("enable_wildcard", True)):
        assert "cannot be cached" in fields(**{name: value, "cache_text_encoder_outputs": True})[name]
    assert not fields(weighted_captions=True, cache_text_encoder_outputs=True, max_token_length=225)
    assert "use 150 or 225" in fields(max_token_length=100)["max_token_length"]
    assert "is empty" in fields(caption_separator="")["caption_separator"]
    assert "same as caption_separator" in fields(secondary_separator=",")["secondary_separator"]


def test_sd_scripts_keys_are_options_now() -> None:
    for key in ("max_token_length", "vae_batch_size", "color_aug", "persistent_data_loader_workers"):
        assert key not in IGNORED
    warnings: list[str] = []
    cfg = config_from_dict("lora", {"max_token_length": 225, "vae_batch_size": 4, "color_aug": True,
                                    "persistent_data_loader_workers": False, "weighted_captions": True,
                                    "token_warmup_min": 2, "token_warmup_step": 0.3, "enable_wildcard": True,
                                    "secondary_separator": ";;;", "caption_separator": ","}, warnings=warnings)
    assert not warnings
    assert (cfg.max_token_length, cfg.vae_batch_size, cfg.persistent_data_loader_workers) == (225, 4, False)
    defaults = TrainConfig("lora")
    assert (defaults.max_token_length, defaults.vae_batch_size, defaults.token_warmup_min) == (None, None, 1)
    assert defaults.persistent_data_loader_workers and defaults.caption_separator == ","


def test_the_pipeline_sets_prompts_cache_batch_and_workers(tiny_sd1_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.data.pipeline as pipeline
    from trainers.models import load_model

    data = folder_dataset(tmp_path / "data", images=3, caption="x" * 100)  # 100 tokens: more than 75
    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, device=torch.device("cpu"))
    batch_sizes = []
    real = pipeline.build_latent_cache

    def spy(catalog, vae, to_disk, batch_size, *args, **kwargs):
        batch_sizes.append(batch_size)
        return real(catalog, vae, to_disk, batch_size, *args, **kwargs)

    monkeypatch.setattr(pipeline, "build_latent_cache", spy)
    monkeypatch.setattr(pipeline.Dist, "of", classmethod(lambda cls, acc: cls()))
    cfg = config(data, max_data_loader_n_workers=1, weighted_captions=True, cache_latents=True, train_batch_size=2)
    built = pipeline.build_pipeline(cfg, build_catalog(cfg.values), model, accelerator, EventWriter(tmp_path / "run"))
    assert built.model.prompt_format.max_token_length is None and built.model.prompt_format.weighted
    assert model.prompt_format == PromptFormat()  # the loaded model is left as it was
    assert built.loader.persistent_workers and batch_sizes == [2]  # as before these options existed
    warned = [e["message"] for e in events(tmp_path / "run") if e["type"] == "warning"]
    assert len(warned) == 1 and "1 caption(s) have more than the 75 tokens" in warned[0]

    cfg = cfg.replace(persistent_data_loader_workers=False, vae_batch_size=3, max_token_length=150)
    built = pipeline.build_pipeline(cfg, build_catalog(cfg.values), model, accelerator, EventWriter(tmp_path / "r2"))
    assert not built.loader.persistent_workers and batch_sizes[-1] == 3
    assert built.model.prompt_format.max_token_length == 150 and built.dataset[(0, 0, 0)]["input_ids"][0].ids.shape == (154,)
    assert not [e for e in events(tmp_path / "r2") if e["type"] == "warning"]  # 100 tokens fit in 150


# ---- end to end --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_lora_trains_with_every_caption_option(tiny_sdxl_dir: Path, tmp_path: Path) -> None:
    from helpers import train

    long_caption = "sks shape, (red circle:1.3), [blurry], {big|small} ball;;;round, " + ", ".join(
        f"tag number {i}" for i in range(8))  # more than 75 tokens, less than 150
    data = folder_dataset(tmp_path / "data", images=2, caption=long_caption, name="2_sks shape")
    out = tmp_path / "out"
    code = train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_sdxl_dir), train_data_dir=str(data),
                 output_dir=str(out), resolution="64", train_batch_size=2, max_train_steps=2, learning_rate=1e-3,
                 network_dim=4, network_alpha=2, max_data_loader_n_workers=1, persistent_data_loader_workers=False,
                 max_token_length=150, weighted_captions=True, enable_wildcard=True, secondary_separator=";;;",
                 shuffle_caption=True, keep_tokens=1, token_warmup_min=2, token_warmup_step=1, color_aug=True,
                 sample_prompt_lines=[long_caption.replace("{big|small}", "big") + " --w 64 --h 64 --s 2"],
                 sample_every_n_steps=2)
    assert code == 0
    assert (out / "lora.safetensors").exists()
    samples = list((tmp_path / "run" / "samples").glob("*.png"))
    assert len(samples) == 1
    assert not [e for e in events(tmp_path / "run") if e["type"] == "warning" and "max_token_length" in e["message"]]
