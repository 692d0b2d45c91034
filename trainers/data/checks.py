"""Checks of the dataset options: those that only make sense together, each message saying how to fix it.

Torch-free (the GUI's Validate runs them). The files themselves are checked by the preflight.
"""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.core.options import TrainConfig, parse_resolution
from trainers.data.metadata_json import parse_replacements, parse_score_tags, parse_tag_bonus

# Options that change a caption from one epoch (or step) to the next: cached text-encoder outputs cannot follow them.
CAPTION_RANDOMNESS = ("shuffle_caption", "caption_dropout_rate", "caption_tag_dropout_rate", "metadata_shuffle_tag_p",
                      "enable_wildcard", "token_warmup_step")
TOKEN_LENGTHS = (75, 150, 225)  # max_token_length: 75-token chunks, as sd-scripts allows


def dataset_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []

    def bad(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, "dataset"))

    if not any(str(cfg.values[n]).strip() for n in ("train_data_dir", "metadata_dir", "dataset_config", "in_json")):
        bad("train_data_dir", "is required: give a folder of <repeats>_<tokens> subfolders (or set metadata_dir "
            "or dataset_config)")
    if cfg.enable_bucket:
        issues.extend(bucket_issues(cfg.resolution, cfg.min_bucket_reso, cfg.max_bucket_reso, cfg.bucket_reso_steps))
    for name, parse in (("metadata_tag_bonus", parse_tag_bonus), ("metadata_tag_replacements", parse_replacements),
                        ("metadata_score_tags", parse_score_tags)):
        try:
            parse(cfg.values[name])
        except ValueError as err:
            bad(name, str(err))
    caching = cfg.cache_latents or cfg.cache_latents_to_disk
    if caching and cfg.random_crop:
        bad("random_crop", "cannot be combined with cache_latents: a cached latent has one fixed crop; turn off "
            "random_crop or latent caching")
    if caching and cfg.values["color_aug"]:
        bad("color_aug", "cannot be combined with cache_latents: a cached latent has one fixed color; turn off "
            "color_aug or latent caching")
    issues.extend(caption_issues(cfg))
    if cfg.values["validation_split"] >= 1:
        bad("validation_split", f"is {cfg.values['validation_split']}: that holds out every image; use a share below "
            "1, e.g. 0.1")
    if cfg.cache_text_encoder_outputs:
        for name in CAPTION_RANDOMNESS:
            if cfg.values[name]:
                bad(name, "changes captions from one epoch (or step) to the next, so text-encoder outputs cannot be "
                    "cached: turn it off or set cache_text_encoder_outputs = false")
    if cfg.values.get("cache_text_encoder_outputs_to_disk") and not cfg.cache_text_encoder_outputs:
        bad("cache_text_encoder_outputs_to_disk", "keeps the cached outputs in files: set cache_text_encoder_outputs "
            "= true too (sd-scripts turns it on by itself)")
    return issues


def caption_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """Caption and prompt-length options whose values only make sense in some combinations."""
    issues: list[ConfigIssue] = []
    length = cfg.values["max_token_length"]
    if length is not None and length not in TOKEN_LENGTHS:
        issues.append(ConfigIssue("max_token_length", f"is {length}; use 150 or 225 (or leave it unset for 75): "
                                  "CLIP reads captions in 75-token chunks", "dataset"))
    if not cfg.values["caption_separator"]:
        issues.append(ConfigIssue("caption_separator", "is empty; give the text between tags, e.g. ','", "dataset"))
    secondary = cfg.values["secondary_separator"]
    if secondary and secondary.strip() == cfg.values["caption_separator"].strip():
        issues.append(ConfigIssue("secondary_separator", "is the same as caption_separator; use another marker "
                                  "(e.g. ';;;') or leave it empty", "dataset"))
    return issues


def bucket_issues(resolution: str, min_reso: int, max_reso: int, steps: int) -> list[ConfigIssue]:
    """Bucket settings against the resolution (also used for each dataset of a dataset_config)."""
    issues: list[ConfigIssue] = []

    def bad(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, "dataset"))

    try:
        width, height = parse_resolution(resolution)
    except ValueError:
        return issues  # reported for resolution itself
    for name, value in (("bucket_reso_steps", steps), ("min_bucket_reso", min_reso), ("max_bucket_reso", max_reso)):
        if value % 8:
            bad(name, f"got {value}; use a multiple of 8 (the VAE works in 8-pixel blocks), e.g. {value // 8 * 8 or 8}")
    if min_reso > min(width, height):
        bad("min_bucket_reso", f"is {min_reso}, larger than the resolution's smaller side {min(width, height)}; "
            f"set it to {min(width, height)} or less")
    if max_reso < max(width, height):
        bad("max_bucket_reso", f"is {max_reso}, smaller than the resolution's larger side {max(width, height)}; "
            f"set it to {max(width, height)} or more")
    return issues
