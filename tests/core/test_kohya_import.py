"""Bring your kohya setup: every config of the corpus (kohya_ss GUI JSONs, sd-scripts --config_file TOMLs) either
loads and validates once its paths point at real folders, or is refused with the key and the reason."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from trainers.core.options import ConfigError, config_from_dict
from trainers.core.options.kohya_import import import_kohya_file
from trainers.demo import build_dataset

CORPUS = Path(__file__).parent / "kohya_corpus"
FILES = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".json", ".toml"))


def name(path: Path) -> str:
    return path.relative_to(CORPUS).as_posix()


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stand-ins for the paths a corpus file names: a model folder, datasets, a dataset config, files."""
    root = tmp_path_factory.mktemp("kohya")
    model = root / "model"
    (model / "unet").mkdir(parents=True)
    (model / "model_index.json").write_text("{}", encoding="utf-8")
    vae = root / "vae"
    vae.mkdir()
    (vae / "config.json").write_text("{}", encoding="utf-8")
    img = build_dataset(root / "img", size=256)  # big enough for 256-pixel buckets without upscaling
    reg = build_dataset(root / "reg", folder="1_shape", size=256)
    subset = f'[[datasets]]\n[[datasets.subsets]]\nimage_dir = "{img / "5_sks shape"}"\nnum_repeats = 1\n'
    dataset, masked = root / "dataset.toml", root / "masked.toml"
    dataset.write_text(subset, encoding="utf-8")
    # the images serve as their own masks (their red channel weighs the loss)
    masked.write_text(subset + f'conditioning_data_dir = "{img / "5_sks shape"}"\n', encoding="utf-8")
    prompts = root / "prompts.txt"
    prompts.write_text("sks shape, red circle --s 4\n", encoding="utf-8")
    weights = root / "weights.safetensors"
    weights.write_bytes(b"")
    flux = root / "flux1-dev.safetensors"  # a FLUX.1 transformer file's header: what Validate reads of it
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(1)}, flux)
    sd3 = root / "sd3_medium.safetensors"  # an SD3 file with its VAE
    save_file({"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight": torch.zeros(1),
               "first_stage_model.encoder.conv_in.weight": torch.zeros(1)}, sd3)
    parts = {option: root / f"{option}.safetensors" for option in ("clip_l", "clip_g", "t5xxl", "ae")}
    for part in parts.values():
        part.write_bytes(b"")
    return {"pretrained_model_name_or_path": model, "flux_transformer": flux, "sd3_file": sd3, **parts, "vae": vae, "train_data_dir": img, "reg_data_dir": reg,
            "dataset_config": dataset, "masked_dataset_config": masked, "sample_prompts": prompts, "network_weights": weights,
            "output_dir": root / "out", "logging_dir": root / "logs", "conditioning_data_dir": img}


def pointed(values: dict[str, Any], places: dict[str, Path]) -> dict[str, Any]:
    """`values` with every path it sets pointed at the stand-ins, and the model, images and output folder a GUI
    preset leaves to the user filled in (resume and base weights are left out)."""
    out = dict(values)
    for key, value in values.items():
        if key in places and str(value or "").strip():
            out[key] = str(places[key])
        elif key in ("resume", "base_weights", "base_weights_multiplier"):
            out.pop(key)
    if out.get("ae"):  # sd-scripts' FLUX.1 files: the transformer file with its parts
        out["pretrained_model_name_or_path"] = str(places["flux_transformer"])
    elif out.get("clip_g"):  # SD3's
        out["pretrained_model_name_or_path"] = str(places["sd3_file"])
    if out.get("dataset_config") and out.get("masked_loss"):
        out["dataset_config"] = str(places["masked_dataset_config"])
    for key in ("pretrained_model_name_or_path", "output_dir") + (() if out.get("dataset_config") else
                                                                  ("train_data_dir",)):
        out.setdefault(key, str(places[key]))
    return out


def try_import(path: Path, places: dict[str, Path]) -> tuple[str, list[str], list[str]]:
    """('loaded' or 'refused', problems as 'key: message', notes)."""
    from trainers.data.preflight import preflight

    try:
        method, values, notes = import_kohya_file(path)
    except ConfigError as err:
        return "refused", [str(i) for i in err.issues], []
    cfg = config_from_dict(method, pointed(values, places))
    report = preflight(cfg)
    return ("refused" if report.errors else "loaded"), [str(i) for i in report.errors], notes


# Files refused, and the keys their issues name: all for a model family, a kind of training or a setting
# Atelier does not have.
REFUSED = {
    "kohya_ss/presets/finetune/SDXL - Essenz series by AI_Characters_Training v1.0.json": {"image_folder"},
    "kohya_ss/test/config/finetune-AdamW.json": {"image_folder"},
    "kohya_ss/test/config/TI-AdamW8bit.json": {"token_string"},
    "kohya_ss/test/config/TI-AdamW8bit-SDXL.json": {"token_string"},
    "kohya_ss/test/config/TI-AdamW8bit-toml.json": {"token_string"},
    "sd_scripts/sd3_finetune.toml": {"enable_scaled_pos_embed"},
    "sd_scripts/kohya_ss_finetune_in_json.toml": {"in_json"},
    "kohya_ss/presets/lora/sd15 - EDG_LoConOptiSettings.json": {"resolution"},
    "kohya_ss/presets/lora/sd15 - EDG_LoHaOptiSettings.json": {"resolution"},
    "kohya_ss/presets/lora/sd15 - EDG_LoraOptiSettings.json": {"resolution"},
}


def test_the_corpus_is_what_its_readme_says() -> None:
    assert 60 <= len(FILES) <= 80
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    assert "bmaltais/kohya_ss" in readme and "sd_scripts/" in readme


@pytest.mark.parametrize("path", FILES, ids=name)
def test_each_config_loads_or_is_refused_by_key(path: Path, places: dict[str, Path]) -> None:
    outcome, problems, notes = try_import(path, places)
    expected = REFUSED.get(name(path))
    if expected is None:
        assert outcome == "loaded", "\n".join(problems)
    else:
        assert outcome == "refused"
        assert {p.split(": ", 1)[0] for p in problems} == expected, problems
    assert not [n for n in notes if "not a kohya_ss field known here" in n], notes


def test_corpus_numbers(places: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The numbers docs/kohya.md gives: how many load, and every refused key with its reason."""
    outcomes: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    for path in FILES:
        outcome, problems, _ = try_import(path, places)
        outcomes[outcome] += 1
        for problem in problems:
            key, _, message = problem.partition(": ")
            reasons.setdefault(key, message)
    with capsys.disabled():
        print(f"\nkohya corpus: {len(FILES)} files, {outcomes['loaded']} load, {outcomes['refused']} refused")
        for key, message in sorted(reasons.items()):
            print(f"  refused {key}: {message}")
    assert outcomes["loaded"] == len(FILES) - len(REFUSED)


def test_every_kohya_ss_field_of_the_corpus_is_known() -> None:
    from trainers.core.options.kohya_json import convert

    for path in FILES:
        if path.suffix == ".json":
            converted = convert(json.loads(path.read_text(encoding="utf-8")), [])
            unknown = [n for n in converted.notes if "not a kohya_ss field known here" in n]
            assert not unknown, (name(path), unknown)


def test_the_doc_names_every_refused_key() -> None:
    from trainers.core.options.kohya_keys import REFUSED

    doc = (Path(__file__).resolve().parents[2] / "docs" / "kohya.md").read_text(encoding="utf-8")
    assert not [key for key in REFUSED if f"`{key}`" not in doc]


def test_keys_kohya_ss_writes_load_and_empty_ones_quietly(tmp_path: Path) -> None:
    from trainers.core.options import load_config

    path = tmp_path / "kohya.toml"
    path.write_text("""
lr_scheduler_args = []
network_args = []
noise_offset_type = "Original"
epoch = 4
max_train_epochs = 4
max_timestep = 1000
text_encoder_lr = [5e-5, 5e-5]
huber_c = 0.1
huber_schedule = "snr"
huber_scale = 1
loss_type = "l2"
sample_prompts = ""
save_every_n_epochs = 1
bucket_reso_steps = 64
caption_dropout_every_n_epochs = 0
max_data_loader_n_workers = 0
persistent_data_loader_workers = 0
log_prefix = ""
wandb_run_name = ""
wandb_api_key = ""
huggingface_repo_id = ""
huggingface_token = ""
sdpa = true
xformers = false
mem_eff_attn = false
full_fp16 = false
full_bf16 = false
fp8_base = false
lowram = false
save_state_on_train_end = false
metadata_title = ""
ip_noise_gamma = 0
debiased_estimation_loss = false
multires_noise_iterations = 0
multires_noise_discount = 0.3
min_snr_gamma = 5
scale_v_pred_loss_like_noise_pred = false
v_pred_like_loss = 0
network_train_unet_only = false
network_train_text_encoder_only = false
cache_latents_to_disk = false
vae_batch_size = 1
t5xxl = ""
guidance_scale = 0
""", encoding="utf-8")
    warnings: list[str] = []
    cfg = load_config("lora", path, warnings=warnings)
    assert cfg.text_encoder_lr == 5e-5 and cfg.persistent_data_loader_workers is False and cfg.max_timestep == 1000
    assert cfg.network_alpha == 1.0 and cfg.caption_extension == ".caption"  # sd-scripts' defaults
    said = " | ".join(warnings)
    assert "epoch = 4 (kohya_ss) is not used" in said and "sd-scripts' defaults" in said
    assert len(warnings) == 2, warnings  # nothing about the empty or off keys


def test_kohya_ss_flux_lora_json_reads_as_kohya_ss_runs_it(tmp_path: Path) -> None:
    """A 'Flux1' LoRA with the FLUX checkbox: its files, flow options and layer fields as kohya_ss passes them to
    flux_train_network.py; the SD noise and loss settings kohya_ss passes too (sd-scripts' FLUX trainer does not
    read them) are left out with a note; what is not available is refused by name."""
    from trainers.core.options import load_config

    fields = {"LoRA_type": "Flux1", "flux1_checkbox": True, "pretrained_model_name_or_path": "/m/flux1-dev.sft",
              "t5xxl": "/t5.safetensors", "ae": "/ae.sft", "clip_l": "/c.safetensors", "guidance_scale": 1.0,
              "timestep_sampling": "shift", "discrete_flow_shift": 3.1582, "learning_rate": 1e-4, "network_dim": 8,
              "img_attn_dim": "4", "train_single_block_indices": "0-9", "flux1_cache_text_encoder_outputs": True,
              "min_snr_gamma": 5, "noise_offset": 0.05, "max_timestep": 1000, "blocks_to_swap": 8}
    method, values, notes = import_kohya_file(_json(tmp_path, fields))
    assert method == "lora" and values["ae"] == "/ae.sft" and values["timestep_sampling"] == "shift"
    assert values["network_args"] == ["img_attn_dim=4", "train_single_block_indices=0-9"]
    assert values["cache_text_encoder_outputs"] is True and values["discrete_flow_shift"] == 3.1582
    assert not {"min_snr_gamma", "noise_offset", "max_timestep"} & set(values)
    said = " | ".join(notes)
    assert "min_snr_gamma, noise_offset, max_timestep (kohya_ss passes them for every model) are left out" in said
    assert values["blocks_to_swap"] == 8
    _, split, _ = import_kohya_file(_json(tmp_path, {**fields, "split_qkv": True}))  # passed as kohya_ss does
    assert split["network_args"] == ["img_attn_dim=4", "train_single_block_indices=0-9", "split_qkv=True"]
    for refused, extra in (("train_t5xxl", {"train_t5xxl": True}), ("flux1_checkbox", {"LoRA_type": "Flux1 OFT"})):
        with pytest.raises(ConfigError) as err:
            load_config("lora", _json(tmp_path, {**fields, **extra}))
        assert [i.field for i in err.value.issues] == [refused], err.value.issues


def test_kohya_ss_sd3_lora_json_reads_its_files_under_the_lora_tabs_names(tmp_path: Path) -> None:
    """kohya_ss's LoRA tab names SD3's CLIP-L and T5 files sd3_clip_l and sd3_t5xxl; it passes them as clip_l and
    t5xxl to sd3_train_network.py, with clip_g and the weighting options."""
    fields = {"LoRA_type": "Standard", "sd3_checkbox": True, "pretrained_model_name_or_path": "/m/sd3.5.safetensors",
              "sd3_clip_l": "/c_l.safetensors", "clip_g": "/c_g.safetensors", "sd3_t5xxl": "/t5.safetensors",
              "clip_l": "", "t5xxl": "", "weighting_scheme": "logit_normal", "learning_rate": 1e-4,
              "sd3_cache_text_encoder_outputs": True, "min_snr_gamma": 5}
    method, values, notes = import_kohya_file(_json(tmp_path, fields))
    assert method == "lora" and values["model_family"] == "sd3"
    assert (values["clip_l"], values["clip_g"], values["t5xxl"]) == ("/c_l.safetensors", "/c_g.safetensors",
                                                                       "/t5.safetensors")
    assert values["cache_text_encoder_outputs"] is True and "min_snr_gamma" not in values
    assert any("sd-scripts' SD3 trainer does not read them" in n for n in notes)


def _json(tmp_path: Path, fields: dict[str, Any]) -> Path:
    path = tmp_path / "kohya_ss.json"
    path.write_text(json.dumps(fields), encoding="utf-8")
    return path

def test_kohya_ss_finetune_json_reads_its_image_folder_through_the_metadata_file_kohya_ss_built(
        tmp_path: Path) -> None:
    """kohya_ss's finetune tab passes fine_tune.py image_folder as train_data_dir and train_dir/<metadata file> as
    in_json: with that file there (an earlier kohya_ss run built it), the config loads and trains on its captions;
    without it, image_folder is refused naming the file."""
    from trainers.core.options import load_config
    from trainers.data.catalog import build_catalog

    images = build_dataset(tmp_path / "img", folder="images", size=64) / "images"
    train_dir = tmp_path / "train dir"
    train_dir.mkdir()
    meta = {p.stem: {"caption": f"meta {p.stem}", "train_resolution": [64, 64]} for p in images.glob("*.png")}
    (train_dir / "meta_lat.json").write_text(json.dumps(meta), encoding="utf-8")
    fields = {"image_folder": str(images), "train_dir": str(train_dir), "use_latent_files": "Yes",
              "latent_metadata_filename": "meta_lat.json", "caption_metadata_filename": "meta_cap.json",
              "dataset_repeats": "3", "pretrained_model_name_or_path": "runwayml/stable-diffusion-v1-5",
              "learning_rate": 1e-5, "max_resolution": "64,64"}
    method, values, notes = import_kohya_file(_json(tmp_path, fields))
    assert method == "finetune"
    assert values["in_json"] == str(train_dir / "meta_lat.json") and values["train_data_dir"] == str(images)
    assert any("meta_lat.json (in_json) as kohya_ss last built it" in n for n in notes), notes
    cfg = load_config("finetune", _json(tmp_path, fields))
    catalog = build_catalog(cfg.values, [])
    assert len(catalog.samples) == 3 * len(meta)  # dataset_repeats
    assert {i.caption for i in catalog.images} == {m["caption"] for m in meta.values()}
    with pytest.raises(ConfigError) as err:  # meta_cap.json (use_latent_files "No") was never built
        load_config("finetune", _json(tmp_path, {**fields, "use_latent_files": "No"}))
    assert [i.field for i in err.value.issues] == ["image_folder"]
    assert str(train_dir / "meta_cap.json") in err.value.issues[0].message
