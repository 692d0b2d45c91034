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

from trainers.core.options import ConfigError, TrainConfig, config_from_dict
from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.demo import build_dataset

CORPUS = Path(__file__).parent / "kohya_corpus"
FILES = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".json", ".toml"))


def _configs(folder: Path, files: dict[str, dict]) -> Path:
    for relative, content in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(json.dumps(content), encoding="utf-8")
    return folder


def name(path: Path) -> str:
    return path.relative_to(CORPUS).as_posix()


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stand-ins for the paths a corpus file names: a model folder, datasets, a dataset config, files."""
    root = tmp_path_factory.mktemp("kohya")
    # The model folders, VAE and component files hold what Validate reads of them: their configs and names.
    model = _configs(root / "model", {"model_index.json": {"_class_name": "StableDiffusionPipeline"},
                                      "unet/config.json": {"cross_attention_dim": 768},
                                      "text_encoder/config.json": {"num_hidden_layers": 12}})
    sdxl = _configs(root / "sdxl", {"model_index.json": {"_class_name": "StableDiffusionXLPipeline"},
                                    "unet/config.json": {"cross_attention_dim": 2048}})
    vae = _configs(root / "vae", {"config.json": {"_class_name": "AutoencoderKL", "latent_channels": 4}})
    save_file({"encoder.conv_in.weight": torch.zeros(1)}, vae / "diffusion_pytorch_model.safetensors")
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
    save_file({"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": torch.zeros(4, 8)}, weights)
    flux = root / "flux1-dev.safetensors"  # a FLUX.1 transformer file's header: what Validate reads of it
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(1)}, flux)
    sd3 = root / "sd3_medium.safetensors"  # an SD3 file with its VAE
    save_file({"model.diffusion_model.joint_blocks.0.x_block.attn.qkv.weight": torch.zeros(1),
               "first_stage_model.encoder.conv_in.weight": torch.zeros(1)}, sd3)
    clip = ("text_model.embeddings.token_embedding.weight", "text_model.encoder.layers.0.mlp.fc1.weight")
    names = {"clip_l": clip, "clip_g": clip, "ae": ("encoder.conv_in.weight", "encoder.down.0.block.0.conv1.weight", "decoder.conv_in.weight"),
             "t5xxl": ("shared.weight", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight")}
    parts = {option: root / f"{option}.safetensors" for option in names}
    for option, path in parts.items():
        save_file({key: torch.zeros(1) for key in names[option]}, path)
    return {"pretrained_model_name_or_path": model, "sdxl_model": sdxl, "flux_transformer": flux, "sd3_file": sd3,
            **parts, "vae": vae,
            "train_data_dir": img, "image_folder": img / "5_sks shape", "reg_data_dir": reg,
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
    elif out.get("model_family") == "sdxl":
        out["pretrained_model_name_or_path"] = str(places["sdxl_model"])
    if out.get("in_json_from_captions"):  # kohya_ss's finetune image_folder: the images themselves
        out["train_data_dir"] = str(places["image_folder"])
    if out.get("dataset_config") and out.get("masked_loss"):
        out["dataset_config"] = str(places["masked_dataset_config"])
    for key in ("pretrained_model_name_or_path", "output_dir") + (() if out.get("dataset_config") else
                                                                  ("train_data_dir",)):
        out.setdefault(key, str(places[key]))
    return out


def try_import(path: Path, places: dict[str, Path]) -> tuple[str, list[str], list[str]]:
    """('loaded' or 'refused', problems as 'key: message', notes)."""
    from trainers.preflight.report import preflight

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
    "sd_scripts/sd3_finetune.toml": {"enable_scaled_pos_embed"},
    "sd_scripts/kohya_ss_finetune_in_json.toml": {"in_json"},
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
    assert not [n for n in notes if "not kohya_ss fields known here" in n], notes


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
    from trainers.adapters.kohya.gui_json import convert

    for path in FILES:
        if path.suffix == ".json":
            converted = convert(json.loads(path.read_text(encoding="utf-8")), [])
            unknown = [n for n in converted.notes if "not kohya_ss fields known here" in n]
            assert not unknown, (name(path), unknown)


def test_the_doc_names_every_refused_key() -> None:
    from trainers.adapters.kohya.keys import REFUSED

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
    defaults = TrainConfig("lora").values  # fields of the file that FLUX does not read: their defaults
    assert all(values[name] == defaults[name] for name in ("min_snr_gamma", "noise_offset", "max_timestep"))
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
    assert values["cache_text_encoder_outputs"] is True and values["min_snr_gamma"] != 5
    assert any("sd-scripts' SD3 trainer does not read them" in n for n in notes)


def _json(tmp_path: Path, fields: dict[str, Any]) -> Path:
    path = tmp_path / "kohya_ss.json"
    path.write_text(json.dumps(fields), encoding="utf-8")
    return path


def _toml(tmp_path: Path, text: str, name: str = "sd_scripts.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_kohya_ss_finetune_json_builds_its_metadata_from_the_caption_files_as_kohya_ss_does(tmp_path: Path) -> None:
    """kohya_ss's finetune tab writes image_folder's captions into train_dir/<metadata file> before each run
    (create_caption, on by default) and passes that file as in_json: with no file there (a config from another
    machine), the captions come from the caption files and the config trains; a file there keeps its other fields
    (tags) with fresh captions. With create_caption off, the file is read as it is, and must be there."""
    from trainers.core.options import load_config
    from trainers.data.catalog import build_catalog

    images = build_dataset(tmp_path / "img", folder="images", size=64) / "images"
    train_dir = tmp_path / "train dir"
    train_dir.mkdir()
    fields = {"image_folder": str(images), "train_dir": str(train_dir), "use_latent_files": "Yes",
              "latent_metadata_filename": "meta_lat.json", "caption_metadata_filename": "meta_cap.json",
              "dataset_repeats": "3", "pretrained_model_name_or_path": "runwayml/stable-diffusion-v1-5",
              "learning_rate": 1e-5, "max_resolution": "64,64", "caption_extension": ".txt"}
    captions = {p.stem: p.with_suffix(".txt").read_text(encoding="utf-8") for p in images.glob("*.png")}

    method, values, notes = import_kohya_file(_json(tmp_path, fields))
    assert method == "finetune" and values["train_data_dir"] == str(images)
    assert values["in_json_from_captions"] is True and values["in_json"] == ""
    assert any("read from its caption files" in n and "is not there yet" in n for n in notes), notes
    catalog = build_catalog(load_config("finetune", _json(tmp_path, fields)).values, [])
    assert len(catalog.samples) == 3 * len(captions)  # dataset_repeats
    assert sorted(i.caption for i in catalog.images) == sorted(captions.values())

    meta = {p.stem: {"caption": "an old caption", "tags": "tag1, tag2", "train_resolution": [64, 64]}
            for p in images.glob("*.png")}
    (train_dir / "meta_lat.json").write_text(json.dumps(meta), encoding="utf-8")
    cfg = load_config("finetune", _json(tmp_path, fields))
    assert cfg.in_json == str(train_dir / "meta_lat.json")
    assert sorted(i.caption for i in build_catalog(cfg.values, []).images) == sorted(
        f"{c},tag1, tag2" for c in captions.values())  # joined with caption_separator, as sd-scripts joins them

    kept = load_config("finetune", _json(tmp_path, {**fields, "create_caption": False}))
    assert not kept.in_json_from_captions
    assert {i.caption for i in build_catalog(kept.values, []).images} == {"an old caption,tag1, tag2"}
    with pytest.raises(ConfigError) as err:  # meta_cap.json (use_latent_files "No") was never built
        load_config("finetune", _json(tmp_path, {**fields, "use_latent_files": "No", "create_caption": False}))
    assert [i.field for i in err.value.issues] == ["image_folder"]
    assert str(train_dir / "meta_cap.json") in err.value.issues[0].message


def test_import_sets_every_key_the_file_sets_even_at_atelier_s_default(tmp_path: Path) -> None:
    """A kohya_ss JSON's learning_rate 1e-4, network_dim 16 and batch 1 (Atelier's defaults) are set, and so are the
    fields it leaves empty (kohya_ss passes nothing for them: sd-scripts' default); an sd-scripts TOML's
    max_train_steps unsets the epochs a form may hold (epochs win over steps, in sd-scripts as here)."""
    fields = {"LoRA_type": "Standard", "pretrained_model_name_or_path": "/m", "learning_rate": 0.0001,
              "network_dim": 16, "network_alpha": 8, "train_batch_size": 1, "epoch": 2, "unet_lr": 0,
              "sample_prompts": "", "lr_warmup": 0}
    method, values, _ = import_kohya_file(_json(tmp_path, fields))
    assert method == "lora"
    assert (values["learning_rate"], values["network_dim"], values["train_batch_size"]) == (1e-4, 16, 1)
    assert values["max_train_epochs"] == 2 and values["max_train_steps"] is None
    assert values["unet_lr"] is None and values["sample_prompt_lines"] == [] and values["lr_warmup_steps"] == 0
    assert "conv_dim" not in values  # a field the file does not have stays the page's

    _, values, _ = import_kohya_file(_toml(tmp_path, 'network_module = "networks.lora"\nmax_train_steps = 300\n'
                                                     "network_dim = 16\n"))
    assert values["max_train_steps"] == 300 and values["max_train_epochs"] is None and values["network_dim"] == 16
    _, values, _ = import_kohya_file(_toml(tmp_path, 'network_module = "networks.lora"\ndataset_config = "/d.toml"\n'))
    assert values["train_data_dir"] == "" and values["dataset_config"] == "/d.toml"


def test_import_resolves_relative_output_folders_under_the_runs_folder_and_names_windows_paths(
        tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    fields = {"LoRA_type": "Standard", "output_dir": "./model", "logging_dir": "logs/lora",
              "train_data_dir": "C:/Users/me/train", "reg_data_dir": "E:\\data\\reg", "learning_rate": 1e-4}
    _, values, notes = import_kohya_file(_json(tmp_path, fields), runs_dir=runs)
    assert values["output_dir"] == str(runs / "model") and values["logging_dir"] == str(runs / "logs" / "lora")
    said = " | ".join(notes)
    assert "output_dir = './model' is relative" in said and "under the runs folder" in said
    assert "train_data_dir = 'C:/Users/me/train'" in said and "reg_data_dir = 'E:\\\\data\\\\reg'" in said
    _, ours, _ = import_kohya_file(_toml(tmp_path, 'schema_version = 1\nmethod = "lora"\n[saving]\n'
                                                   'output_dir = "out"\n', "ours.toml"), runs_dir=runs)
    assert ours["output_dir"] == "out"  # our own configs keep their paths


def test_windows_paths_are_named_by_their_field() -> None:
    from trainers.core.options import load_config
    from trainers.core.options.validation import option_issues

    cfg = load_config("lora", overrides=["max_train_steps=1", "output_dir='C:/Users/me/out'",
                                         "train_data_dir='D:\\\\data'", "logging_dir='\\\\\\\\nas\\\\logs'"])
    named = {i.field: i.message for i in option_issues(cfg)}
    for field in ("output_dir", "train_data_dir", "logging_dir"):
        assert "is a Windows path" in named[field], named


def test_a_kohya_ss_config_written_on_windows_loads_with_its_output_folders_at_their_defaults(
        tmp_path: Path) -> None:
    from trainers.core.options import load_config
    from trainers.core.options.validation import option_issues

    fields = {"LoRA_type": "Standard", "learning_rate": 1e-4, "max_train_steps": 10,
              "pretrained_model_name_or_path": "C:/Users/me/models/sd15.safetensors",
              "train_data_dir": "C:/Users/me/data", "output_dir": "C:/Users/me/out", "logging_dir": "C:/Users/me/logs"}
    notes: list[str] = []
    cfg = load_config("lora", _json(tmp_path, fields), warnings=notes)
    assert (cfg.output_dir, cfg.logging_dir) == ("", "")
    said = " | ".join(notes)
    assert "output_dir = 'C:/Users/me/out'" in said and "logging_dir = 'C:/Users/me/logs'" in said
    named = {i.field: i.message for i in option_issues(cfg)}
    assert "is required" in named["output_dir"]
    assert "Windows path" in named["train_data_dir"] and "Windows path" in named["pretrained_model_name_or_path"]
    assert "logging_dir" not in named

    out = tmp_path / "out"
    cfg = load_config("lora", _json(tmp_path, fields), overrides=[f"output_dir='{out}'"])
    assert cfg.output_dir == str(out) and "output_dir" not in {i.field for i in option_issues(cfg)}

    _, values, notes = import_kohya_file(_json(tmp_path, fields), runs_dir=tmp_path / "runs")
    assert "output_dir" not in values and "logging_dir" not in values  # the page keeps its own folders
    assert values["train_data_dir"] == "C:/Users/me/data"
    assert "train_data_dir = 'C:/Users/me/data'" in " | ".join(notes)


def test_unknown_keys_of_kohya_files_are_warned_first_and_ours_stay_errors(tmp_path: Path) -> None:
    from trainers.core.options import load_config

    text = ('network_module = "networks.lora"\nmax_train_steps = 10\nlearning_rat = 1e-4\n'
            "some_new_sd_scripts_flag = true\n[Basics]\nnetwork_dimm = 8\n")
    warnings: list[str] = []
    cfg = load_config("lora", _toml(tmp_path, text), warnings=warnings)
    assert cfg.max_train_steps == 10
    first = warnings[0]
    assert "'learning_rat' (did you mean 'learning_rate'?)" in first and "'network_dimm' (did you mean " \
        "'network_dim'?)" in first and "'some_new_sd_scripts_flag'" in first and "ignored" in first
    json_warnings: list[str] = []
    load_config("lora", _json(tmp_path, {"LoRA_type": "Standard", "learning_rate": 1e-4,
                                        "additional_parameters": "--max_grad_nrm 0"}),
                warnings=json_warnings)
    assert "'max_grad_nrm' (did you mean 'max_grad_norm'?)" in json_warnings[0]
    fields: list[str] = []
    load_config("lora", _json(tmp_path, {"LoRA_type": "Standard", "learning_rate": 1e-4, "netwrk_dim": 8,
                                         "my_tool_notes": "x"}), warnings=fields)
    assert fields[0].startswith("fields that are not kohya_ss fields known here")
    assert "'netwrk_dim' (did you mean 'network_dim'?)" in fields[0] and "'my_tool_notes'" in fields[0]
    with pytest.raises(ConfigError) as err:  # our own TOML
        load_config("lora", _toml(tmp_path, 'schema_version = 1\nmethod = "lora"\n[optimizer]\nlearning_rat = 1\n'))
    assert "did you mean 'learning_rate'" in str(err.value)
    with pytest.raises(ConfigError):  # and so are --set names, whatever the file
        load_config("lora", _toml(tmp_path, text), overrides=["network_dimz=1"])


def test_a_missing_sample_prompts_file_turns_samples_off_with_a_warning(tmp_path: Path) -> None:
    """sd-scripts logs that the prompts file is missing and trains on without samples: so does a run here."""
    from trainers.core.options import load_config

    text = ('network_module = "networks.lora"\nmax_train_steps = 10\nsample_prompts = "/elsewhere/prompts.txt"\n'
            "sample_every_n_steps = 5\nsample_at_first = true\n")
    from trainers.core.options.validation import option_issues
    from trainers.core.prompts import config_prompts

    warnings: list[str] = []
    cfg = load_config("lora", _toml(tmp_path, text), warnings=warnings)
    assert cfg.sample_prompts == "/elsewhere/prompts.txt"  # kept: the saved config loses nothing
    assert config_prompts(cfg.sample_prompts, cfg.sample_prompt_lines) == []  # nothing to sample
    assert "sample_prompts" not in {i.field for i in option_issues(cfg)}  # and the run is not refused
    assert any("sample_prompts: file not found: /elsewhere/prompts.txt" in w and "samples are off" in w
               for w in warnings), warnings
    lines = load_config("lora", _toml(tmp_path, text), overrides=["sample_prompt_lines=['a dog']"])
    assert [p.prompt for p in config_prompts(lines.sample_prompts, lines.sample_prompt_lines)] == ["a dog"]
    _, values, notes = import_kohya_file(_toml(tmp_path, text))  # the page keeps it: Validate says it again
    assert values["sample_prompts"] == "/elsewhere/prompts.txt" and any("file not found" in n for n in notes)


def test_resolution_sides_off_multiples_of_8_are_read_as_sd_scripts_trains_them(tmp_path: Path) -> None:
    from trainers.core.options import load_config

    warnings: list[str] = []
    cfg = load_config("lora", _json(tmp_path, {"LoRA_type": "Standard", "max_resolution": "512,650",
                                               "enable_bucket": False}), warnings=warnings)
    assert cfg.resolution == "512,648"
    assert any("resolution = '512,650' is read as '512,648'" in w and "latents of 64x81" in w for w in warnings)
    from trainers.core.options.validation import option_issues

    ours = load_config("lora", overrides=["resolution='512,650'", "max_train_steps=1"])
    assert "resolution" in {i.field for i in option_issues(ours, check_paths=False)}  # our own configs stay exact


def test_resume_false_means_no_resume(tmp_path: Path) -> None:
    from trainers.core.options import load_config

    warnings: list[str] = []
    cfg = load_config("lora", _toml(tmp_path, 'network_module = "networks.lora"\nresume = false\n'), warnings=warnings)
    assert cfg.resume == "" and any("resume = false is read as no resume" in w for w in warnings)


def test_a_config_from_another_machine_loads_and_says_what_it_changed(tmp_path: Path) -> None:
    """The corpus' config from another machine: imported in the page, its relative outputs go under the runs folder,
    its missing prompts file stays (Validate says samples are off), and the keys that are nothing here are the first
    warning; run as it is, it trains without samples at 512x648."""
    from trainers.core.options import load_config

    path = CORPUS / "sd_scripts/from_another_machine.toml"
    method, values, notes = import_kohya_file(path, runs_dir=tmp_path / "runs")
    assert method == "lora"
    assert values["output_dir"] == str(tmp_path / "runs" / "output" / "my_lora")
    assert values["logging_dir"] == str(tmp_path / "runs" / "logs")
    assert values["sample_prompts"] == "prompts/sample.txt" and values["resume"] == ""
    assert values["max_train_steps"] == 1200 and values["max_train_epochs"] is None
    assert notes[0].startswith("keys that are not options here") and "'perlin_noise'" in notes[0]
    assert "'max_grad_nrom' (did you mean 'max_grad_norm'?)" in notes[0] and "'project_name'" in notes[0]
    warnings: list[str] = []
    cfg = load_config("lora", path, warnings=warnings)
    assert cfg.resolution == "512,648" and cfg.sample_prompts == "prompts/sample.txt"
    assert any(w.startswith("sample_prompts: file not found: prompts/sample.txt") for w in warnings)


def test_an_sdxl_config_s_clip_skip_is_left_out_as_sd_scripts_ignores_it(tmp_path: Path) -> None:
    """sd-scripts' SDXL scripts warn that clip_skip "will be unexpected" and do not read it; SDXL takes none here."""
    from trainers.core.options import load_config

    warnings: list[str] = []
    cfg = load_config("dreambooth", CORPUS / "kohya_ss/test/config/dreambooth-Prodigy-SDXL.json", warnings=warnings)
    assert cfg.model_family == "sdxl" and cfg.clip_skip == 1
    assert any("clip_skip = 2 is left out: sd-scripts' SDXL scripts do not read it" in w for w in warnings)
    sd15 = load_config("lora", _toml(tmp_path, 'network_module = "networks.lora"\nclip_skip = 2\n'))
    assert sd15.clip_skip == 2


@pytest.mark.slow
def test_a_kohya_ss_finetune_json_from_another_machine_trains_on_its_caption_files(tiny_sd1_dir: Path,
                                                                                   tmp_path: Path) -> None:
    """kohya_ss's finetune test config, its image_folder pointed at a folder of images and captions and nothing
    else there (no metadata file): it trains on them for an epoch, as kohya_ss would after building the metadata."""
    from helpers import events, run_trainer, sets

    images = build_dataset(tmp_path / "img", folder="images", size=64) / "images"
    fields = json.loads((CORPUS / "kohya_ss/test/config/finetune-AdamW.json").read_text(encoding="utf-8"))
    fields.update(image_folder=str(images), train_dir=str(tmp_path / "train dir"))
    config = _json(tmp_path, fields)
    small = {"pretrained_model_name_or_path": str(tiny_sd1_dir), "output_dir": str(tmp_path / "out"),
             "resolution": "64", "min_bucket_reso": 64, "max_bucket_reso": 128, "max_train_epochs": 1,
             "dataset_repeats": 1, "mixed_precision": "no", "logging_dir": ""}
    result = run_trainer(["--config", str(config), *sets(**small)], tmp_path / "run", method="finetune")
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(tmp_path / "run")
    assert evs[-1]["type"] == "done" and Path(evs[-1]["output"]).exists()  # 8 images, batch 4 in size buckets
    assert any("read from its caption files" in e.get("message", "") for e in evs if e["type"] == "warning")


def test_an_sd_scripts_controlnet_config_imports_to_the_controlnet_tab(tmp_path: Path) -> None:
    text = ('pretrained_model_name_or_path = "/models/sd15"\ncontrolnet_model_name_or_path = "/models/cn"\n'
            'train_data_dir = "/data/img"\nconditioning_data_dir = "/data/cond"\nlearning_rate = 1e-5\n')
    method, values, notes = import_kohya_file(_toml(tmp_path, text))
    assert method == "controlnet" and "train_control_net.py" in notes[0]
    assert (values["controlnet_model_name_or_path"], values["conditioning_data_dir"]) == ("/models/cn", "/data/cond")
    method, _, _ = import_kohya_file(_toml(tmp_path, text.replace('controlnet_model_name_or_path = "/models/cn"\n', "")))
    assert method == "controlnet"  # control images without masked_loss
    masks = 'network_module = "networks.lora"\nmasked_loss = true\nconditioning_data_dir = "/data/masks"\n'
    assert import_kohya_file(_toml(tmp_path, masks))[0] == "lora"
