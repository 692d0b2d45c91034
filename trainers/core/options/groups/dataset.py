"""Options: Datasets, captions, buckets and caching."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("train_data_dir", "str", "", "Folder holding <repeats>_<tokens> subfolders of images, e.g. '10_sks dog'. "
           "One of train_data_dir, metadata_dir or dataset_config is needed.", "dataset", path="dir"),
    Option("in_json", "str", "", "sd-scripts' fine-tuning metadata: one JSON (or .jsonl) of {image: {caption, tags}} "
           "as merge_captions_to_metadata.py writes it. Its images are in train_data_dir (which then holds the images "
           "themselves, not <repeats>_ subfolders) or at the absolute paths it names; each repeats dataset_repeats "
           "times an epoch.", "dataset", path="file", advanced=True),
    Option("in_json_from_captions", "bool", False, "Take the captions of train_data_dir's images (the images "
           "themselves) from the caption file beside each (<image name><caption_extension>), as kohya_ss's finetune tab "
           "rebuilds its metadata file before each run (sd-scripts' merge_captions_to_metadata.py): an in_json file's "
           "other fields (tags) are kept, or in_json is left empty. Nothing is written. Each image repeats "
           "dataset_repeats times an epoch.", "dataset", advanced=True),
    Option("reg_data_dir", "str", "", "Regularization images, in <repeats>_<class> subfolders like train_data_dir. "
           "They are repeated (as sd-scripts does) until there are as many as training images an epoch.",
           "dataset", path="dir"),
    Option("prior_loss_weight", "float", 1.0, "Loss weight of the regularization images (1 = same as training "
           "images).", "dataset", min=0, advanced=True),
    Option("dataset_config", "str", "", "An sd-scripts dataset config (TOML: [general], [[datasets]], "
           "[[datasets.subsets]] with image_dir, num_repeats, class_tokens, is_reg, ...). When set, train_data_dir, "
           "reg_data_dir and metadata_dir are ignored; the options here are its defaults.", "dataset", path="file",
           advanced=True),
    Option("caption_extension", "str", ".txt", "Extension of the caption file beside each image.", "dataset"),
    Option("caption_prefix", "str", "", "Text put before every caption (after shuffling; joined with a space).",
           "dataset", advanced=True),
    Option("caption_suffix", "str", "", "Text put after every caption (after shuffling; joined with a space).",
           "dataset", advanced=True),
    Option("shuffle_caption", "bool", False, "Shuffle the comma-separated tags of each caption every epoch.",
           "dataset"),
    Option("keep_tokens", "int", 0, "Keep the first N tags of each caption in place (never shuffled or dropped).",
           "dataset", min=0, max=255),
    Option("keep_tokens_separator", "str", "", "A marker such as '|||': tags before it stay in place, tags after it "
           "are shuffled/dropped, tags after a second marker stay at the end. Wins over keep_tokens.", "dataset",
           advanced=True),
    Option("caption_dropout_rate", "float", 0.0, "Share of samples trained with an empty caption (e.g. 0.05).",
           "dataset", min=0, max=1, advanced=True),
    Option("caption_tag_dropout_rate", "float", 0.0, "Share of tags left out of each caption (kept tags are never "
           "dropped).", "dataset", min=0, max=1, advanced=True),
    Option("caption_separator", "str", ",", "What separates the tags of a caption, for shuffle_caption, keep_tokens, "
           "tag dropout and token warmup. The tags are put back together with ', ' (as sd-scripts does).", "dataset",
           advanced=True),
    Option("secondary_separator", "str", "", "A second separator (e.g. ';;;') that joins the parts of one tag: they "
           "are kept, shuffled and dropped together, then it is replaced by caption_separator.", "dataset",
           advanced=True),
    Option("enable_wildcard", "bool", False, "Wildcards in captions: each sample picks one of {a|b|c} ({{ and }} are "
           "literal braces), and one line of a multi-line caption file (without it, only the first line is used). "
           "Also in caption_prefix/suffix. Captions then vary, so text-encoder outputs cannot be cached.", "dataset",
           advanced=True),
    Option("strict_captions", "bool", False, "Stop at a caption file that is not UTF-8 (UTF-16 and UTF-32 files with "
           "a byte-order mark are read as they say). Off: one without a mark is read as Windows-1252 (as Windows "
           "editors save text), one that is not text (NUL characters, a broken UTF-16 file) is left out, its image "
           "training as if it had no caption file; both are named in the run's warnings.", "dataset", advanced=True),
    Option("token_warmup_min", "int", 1, "Token warmup: how many tags (after the kept ones) captions show at the "
           "first step.", "dataset", min=0, max=255, advanced=True),
    Option("token_warmup_step", "float", 0.0, "Token warmup: the step from which captions show all their tags (below "
           "1: that share of the run's steps; 0 = off). Until then they show their first tags, more as steps go "
           "by, before shuffling and tag dropout.", "dataset", min=0, advanced=True),
    Option("weighted_captions", "bool", False, "Read A1111 emphasis in captions and sample prompts: (word:1.3), "
           "(word) = x1.1, [word] = /1.1. The brackets are removed and each token's embedding is multiplied by its "
           "weight (not renormalized, as sd-scripts). Keep commas out of brackets when tags are shuffled or dropped.",
           "dataset", advanced=True),
    Option("max_token_length", "int", None, "Tokens a caption may have: unset (75), 150 or 225. Longer captions are "
           "encoded in 75-token chunks as sd-scripts does; beyond it they are cut, with a warning. Sample prompts "
           "are encoded the same way.", "dataset", nullable=True, min=75, max=225, advanced=True),
    Option("resolution", "str", "512", "Training size: 'N' for NxN or 'W,H'. Multiples of 8.", "dataset"),
    Option("enable_bucket", "bool", False, "Aspect-ratio buckets: train each image at the bucket size nearest its "
           "aspect ratio (area up to the resolution's) instead of cropping it to the resolution.", "dataset"),
    Option("min_bucket_reso", "int", 256, "Smallest bucket side in pixels (at most the resolution's smaller side).",
           "dataset", min=32, max=8192, advanced=True),
    Option("max_bucket_reso", "int", 1024, "Largest bucket side in pixels (at least the resolution's larger side).",
           "dataset", min=32, max=8192, advanced=True),
    Option("bucket_reso_steps", "int", 64, "Bucket sides are multiples of this (a multiple of 8; 64 is safest).",
           "dataset", min=8, max=512, advanced=True),
    Option("bucket_no_upscale", "bool", False, "Never enlarge an image: small images get a bucket of their own size "
           "(rounded down to bucket_reso_steps) instead.", "dataset", advanced=True),
    Option("random_crop", "bool", False, "Crop at a random position instead of the center.", "dataset", advanced=True),
    Option("flip_aug", "bool", False, "Randomly flip images horizontally.", "dataset", advanced=True),
    Option("color_aug", "bool", False, "Weak color augmentation (as sd-scripts): a third of the samples get a hue "
           "shift of up to 16 degrees or a gamma of 0.95-1.05. Not with latent caching. The gamma applies to 0-1 "
           "values, as the albumentations RandomGamma it stands for (sd-scripts raises 0-255 values to it, which "
           "changes brightness far more).", "dataset", advanced=True),
    Option("metadata_dir", "str", "", "Folder tree of JSON files, one per image: {\"path\": ..., \"tags\": [...], "
           "\"score\": N} (path relative to the JSON file). The caption is the tags; filters below apply.",
           "dataset", path="dir"),
    Option("dataset_repeats", "int", 1, "Repeats of the metadata_dir images an epoch.", "dataset", min=1, max=10000),
    Option("metadata_abs_min_score", "float", None, "Drop images whose score (as in the JSON) is below this.",
           "dataset", nullable=True, advanced=True),
    Option("metadata_min_score", "float", None, "Drop images whose score plus their metadata_tag_bonus is below this.",
           "dataset", nullable=True, advanced=True),
    Option("metadata_tag_bonus", "list", [], "Score bonus per tag for metadata_min_score, as 'tag=number', e.g. "
           "['masterpiece=2', 'sketch=-1'].", "dataset", advanced=True),
    Option("metadata_blacklist_tags", "list", [], "Drop images that have any of these tags.", "dataset",
           advanced=True),
    Option("metadata_remove_tags", "list", [], "Tags left out of the caption (the image is kept).", "dataset",
           advanced=True),
    Option("metadata_tag_replacements", "list", [], "Text replaced in every tag, as 'old->new' (spaces count), e.g. "
           "[' ->_', ':->=']. Tag filters match a tag as written or as replaced.", "dataset", advanced=True),
    Option("metadata_tag_separator", "str", ", ", "Text that joins the tags into the caption.", "dataset",
           advanced=True),
    Option("metadata_score_tags", "list", [], "Score thresholds, e.g. [5, 7, 9]: an image gets the tag 'scrN' (first) "
           "for the highest N its score reaches.", "dataset", advanced=True),
    Option("metadata_shuffle_tag_p", "float", 0.0, "Share of metadata images whose tags are shuffled each epoch "
           "(shuffle_caption shuffles all).", "dataset", min=0, max=1, advanced=True),
    Option("metadata_consider_every_nth", "int", 1, "Use only every n-th JSON file (sorted by path), e.g. 10 for a "
           "small validation set.", "dataset", min=1, max=1000000, advanced=True),
    Option("validation_split", "float", 0.0, "Share of each subset's images held out for a validation loss (e.g. "
           "0.1), as sd-scripts: they are never trained on, and the loss on them at 4 fixed timesteps is shown beside "
           "the training loss (validate_every_n_steps / _epochs). Regularization images are not split. 0 = off.",
           "dataset", min=0, max=1),
    Option("validation_seed", "int", None, "Seed of the validation split and of the validation loss's noise "
           "(unset: seed).", "dataset", nullable=True, min=0, advanced=True),
    Option("cache_latents", "bool", False, "Encode every image with the VAE once, before training, and keep the "
           "latents in memory (faster steps; not with random_crop). Each process encodes every image; "
           "cache_latents_to_disk splits the work.", "dataset"),
    Option("cache_latents_to_disk", "bool", False, "Cache latents in files beside the images (.atelier-cache/), "
           "reused by later runs while the VAE, size and crop stay the same; the work is split across processes.",
           "dataset"),
    Option("vae_batch_size", "int", None, "Images the VAE encodes at once when caching latents (unset: "
           "train_batch_size; sd-scripts' default is 1). Larger is faster and needs more memory.", "dataset",
           nullable=True, min=1, max=1024, advanced=True),
    Option("cache_text_encoder_outputs", "bool", False, "Encode each caption once, before training (needs frozen "
           "text encoders, e.g. network_train_unet_only, and fixed captions: no shuffle or dropout).", "dataset",
           advanced=True),
    Option("cache_text_encoder_outputs_to_disk", "bool", False, "Also keep those outputs in files (.atelier-cache/text "
           "in the first image's folder), so a later run with the same model, captions and text settings reads them "
           "instead of encoding again (T5-XXL's take the longest). Needs cache_text_encoder_outputs.", "dataset",
           advanced=True),
    Option("memoize_encoders", "bool", True, "Reuse what the frozen text encoders and the VAE computed for a caption "
           "or image seen before (kept in CPU memory, up to 512 MB and 1 GB) instead of encoding it again: from the "
           "second epoch on, captions run no text encoder (unless tags are shuffled or dropped) and images without "
           "random_crop or color_aug no VAE. Each kept caption and image is encoded on its own, so a resumed run "
           "trains exactly as one that never stopped. Off: every step encodes its whole batch, as sd-scripts does "
           "without caching (e.g. for benchmarks).", "dataset", advanced=True),
    Option("max_data_loader_n_workers", "int", 2, "Processes that load images in the background (0 = in the "
           "training process).", "dataset", min=0, max=64, advanced=True),
    Option("persistent_data_loader_workers", "bool", True, "Keep the data-loader workers from one epoch to the "
           "next, so an epoch starts without starting them again. On by default here (sd-scripts: off), as before "
           "this option existed; turn it off to free their memory between epochs.", "dataset", advanced=True),
)
