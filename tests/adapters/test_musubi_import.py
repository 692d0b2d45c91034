"""musubi-tuner's Qwen-Image, Z-Image, FLUX.2 and Krea 2 configs (its --config_file TOML) read as Atelier's options:
what has the same meaning passes, the network module names the family, what cannot be honoured is refused by name."""
from __future__ import annotations

from pathlib import Path

import pytest
from config_files import write_toml as _toml

from trainers.adapters.musubi.options import read_musubi
from trainers.core.errors import ConfigError
from trainers.adapters.kohya.page_import import import_kohya_file

# musubi-tuner's docs/qwen_image.md example, as a --config_file TOML (its model files left out)
QWEN_LORA = """
network_module = "networks.lora_qwen_image"
network_dim = 16
mixed_precision = "bf16"
sdpa = true
timestep_sampling = "shift"
weighting_scheme = "none"
discrete_flow_shift = 2.2
optimizer_type = "AdamW8bit"
learning_rate = 5e-5
gradient_checkpointing = true
max_data_loader_n_workers = 2
persistent_data_loader_workers = true
max_train_epochs = 16
save_every_n_epochs = 1
seed = 42
fp8_base = true
blocks_to_swap = 16
flash_attn = false
use_pinned_memory_for_block_swap = true
output_dir = "/tmp/out"
output_name = "qwen-lora"
"""


def test_a_qwen_image_lora_config_reads_with_musubis_meaning(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, QWEN_LORA))
    assert method == "lora"
    assert values["model_family"] == "qwen_image" and values["network_module"] == "networks.lora"
    assert (values["timestep_sampling"], values["discrete_flow_shift"], values["weighting_scheme"]) == \
        ("shift", 2.2, "none")
    assert (values["fp8_base"], values["blocks_to_swap"], values["learning_rate"]) == (True, 16, 5e-5)
    assert values["network_alpha"] == 1.0  # musubi-tuner's default, not ours
    _, values, _ = import_kohya_file(_toml(tmp_path, QWEN_LORA.replace('"shift"', '"qwen_shift"')))
    assert values["timestep_sampling"] == "qwen_shift"
    assert any("use_pinned_memory_for_block_swap" in n for n in notes)


def test_its_model_files_are_read_and_its_dataset_config_refused_by_name(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset.toml"
    dataset.write_text('[general]\nresolution = [1024, 1024]\n\n[[datasets]]\nimage_directory = "/data/img"\n'
                       'cache_directory = "/data/cache"\n', encoding="utf-8")
    files = (f'dit = "/m/qwen_image_bf16.safetensors"\nvae = "/m/qwen_image_vae.safetensors"\n'
             f'text_encoder = "/m/qwen_2.5_vl_7b.safetensors"\ndataset_config = "{dataset}"\n')
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, QWEN_LORA + files))
    fields = {issue.field for issue in err.value.issues}
    assert fields == {"dataset_config"}  # its model files are ComfyUI's split files, read as ours
    assert "train_data_dir" in str(err.value)
    out = read_musubi({"network_module": "networks.lora_qwen_image", "dit": "/m/qwen_image_bf16.safetensors",
                       "text_encoder": "/m/qwen_2.5_vl_7b.safetensors", "vae": "/m/qwen_image_vae.safetensors"},
                      "lora", [], [])
    assert (out["pretrained_model_name_or_path"], out["text_encoder"], out["ae"]) == (
        "/m/qwen_image_bf16.safetensors", "/m/qwen_2.5_vl_7b.safetensors", "/m/qwen_image_vae.safetensors")


@pytest.mark.parametrize("line, field", [
    ('timestep_sampling = "logsnr"', "timestep_sampling"),
    ("fp8_scaled = true", "fp8_scaled"),
    ("edit = true", "edit"),
    ('network_module = "networks.lora_framepack"', "network_module"),  # FramePack is not trained here
])
def test_what_cannot_be_honoured_is_refused_by_name(tmp_path: Path, line: str, field: str) -> None:
    text = "\n".join(x for x in QWEN_LORA.splitlines() if x.split(" = ")[0] != line.split(" = ")[0])
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, text + "\n" + line + "\n"))
    assert [issue.field for issue in err.value.issues] == [field]


def test_z_image_lora_names_its_family_and_musubis_defaults_fill_the_rest() -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"network_module": "networks.lora_zimage", "fp8_llm": False, "compile": True}, "lora", notes,
                      issues)
    assert not issues
    assert (out["model_family"], out["network_module"]) == ("zimage", "networks.lora")
    assert (out["timestep_sampling"], out["discrete_flow_shift"], out["max_train_steps"]) == ("sigma", 1.0, 1600)
    assert "compile" not in out and any("compile" in n for n in notes)


def test_z_image_model_files_are_read_as_the_split_files_options() -> None:
    notes: list[str] = []
    issues: list = []
    flat = {"network_module": "networks.lora_zimage", "dit": "/m/z_image_turbo_bf16.safetensors",
            "text_encoder": "/m/qwen_3_4b.safetensors", "vae": "/m/ae.safetensors"}
    out = read_musubi(flat, "lora", notes, issues)
    assert not issues
    assert (out["pretrained_model_name_or_path"], out["text_encoder"], out["ae"]) == (
        "/m/z_image_turbo_bf16.safetensors", "/m/qwen_3_4b.safetensors", "/m/ae.safetensors")
    assert "dit" not in out and "vae" not in out and any("dit (musubi-tuner) is read as" in n for n in notes)


# musubi-tuner's docs/flux_2.md example, as a --config_file TOML
FLUX2_LORA = """
model_version = "klein-base-9b"
network_module = "networks.lora_flux_2"
network_dim = 32
mixed_precision = "bf16"
sdpa = true
timestep_sampling = "flux2_shift"
weighting_scheme = "none"
optimizer_type = "adamw8bit"
learning_rate = 1e-4
gradient_checkpointing = true
max_train_epochs = 16
seed = 42
fp8_base = true
fp8_text_encoder = true
blocks_to_swap = 13
guidance_scale = 4.0
vae_dtype = "bfloat16"
output_dir = "/tmp/out"
output_name = "flux2-lora"
"""


def test_a_flux2_lora_config_reads_with_musubis_meaning(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, FLUX2_LORA))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("flux2", "networks.lora")
    assert values["pretrained_model_name_or_path"] == "black-forest-labs/FLUX.2-klein-base-9B"  # model_version's
    assert (values["timestep_sampling"], values["fp8_base"], values["blocks_to_swap"]) == ("flux2_shift", True, 13)
    assert values["text_encoder_precision"] == "fp8"
    assert values["guidance_scale"] == 1.0  # musubi-tuner trains FLUX.2 at guidance 1 (its guidance_scale: Hunyuan's)
    assert "model_version" not in values and any("vae_dtype" in n for n in notes)


def test_flux2_model_files_and_unknown_versions_are_refused_by_name(tmp_path: Path) -> None:
    files = ('dit = "/m/flux2-dev.safetensors"\nvae = "/m/ae.safetensors"\n'
             'text_encoder = "/m/mistral_3_small.safetensors"\nfp8_scaled = true\n')
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, FLUX2_LORA + files))
    assert {issue.field for issue in err.value.issues} == {"dit", "vae", "text_encoder", "fp8_scaled"}
    assert "FLUX.2's single files" in str(err.value) and "diffusers folder" in str(err.value)
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, FLUX2_LORA.replace('"klein-base-9b"', '"klein-2b"')))
    assert [issue.field for issue in err.value.issues] == ["model_version"] and "klein-base-4b" in str(err.value)


def test_a_flux2_folder_is_kept_over_model_version_and_krea2_reads_its_shift() -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"network_module": "networks.lora_flux_2", "model_version": "dev",
                       "pretrained_model_name_or_path": "/m/FLUX.2-dev"}, "lora", notes, issues)
    assert not issues and out["pretrained_model_name_or_path"] == "/m/FLUX.2-dev"
    assert any("model_index.json" in n for n in notes)
    out = read_musubi({"network_module": "networks.lora_krea2", "timestep_sampling": "krea2_shift",
                       "turbo_dit_cache": True}, "lora", notes, issues)
    assert not issues and (out["model_family"], out["timestep_sampling"]) == ("krea2", "krea2_shift")
    read_musubi({"network_module": "networks.lora_krea2", "dit": "/m/krea2_raw.safetensors",
                 "turbo_dit": "/m/krea2_turbo.safetensors"}, "lora", notes, issues)
    assert [issue.field for issue in issues] == ["dit", "turbo_dit"] and "Krea 2's single files" in issues[0].message
