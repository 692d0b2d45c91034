"""musubi-tuner's Ideogram 4 LoRA config (docs/ideogram4.md's ideogram4_train_network.py example as a --config_file
TOML) read as Atelier's options: networks.lora_ideogram4 names the family, its timestep sampling (ideogram4_shift,
also the default of its script) is read, its sampling-only options are left out with a note, and its Comfy-Org
model files are refused by name."""
from __future__ import annotations

from pathlib import Path

from config_files import write_toml as _toml

from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.adapters.musubi.options import read_musubi

IDEOGRAM4_LORA = """
network_module = "networks.lora_ideogram4"
network_dim = 16
mixed_precision = "bf16"
sdpa = true
optimizer_type = "adamw8bit"
learning_rate = 1e-4
gradient_checkpointing = true
max_train_epochs = 16
seed = 42
blocks_to_swap = 20
sampler_preset = "V4_DEFAULT_20"
initial_sigma = 1.004
output_dir = "/tmp/out"
output_name = "my_i4_lora"
pretrained_model_name_or_path = "/m/ideogram-v4"
"""


def test_an_ideogram4_lora_config_reads_with_musubis_meaning(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, IDEOGRAM4_LORA))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("ideogram4", "networks.lora")
    assert values["timestep_sampling"] == "ideogram4_shift"  # its script's default, the file leaving it out
    assert (values["weighting_scheme"], values["blocks_to_swap"]) == ("none", 20)
    assert "sampler_preset" not in values and any("sampler_preset" in n and "initial_sigma" in n for n in notes)


def test_its_timestep_sampling_is_read_and_its_model_files_read_as_its_single_files(tmp_path: Path) -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"network_module": "networks.lora_ideogram4", "timestep_sampling": "ideogram4_shift"}, "lora",
                      notes, issues)
    assert not issues and (out["model_family"], out["timestep_sampling"]) == ("ideogram4", "ideogram4_shift")
    files = {"dit": "/m/ideogram4_fp8_scaled.safetensors", "vae": "/m/flux2-vae.safetensors",
             "text_encoder": "/m/qwen3vl_8b_fp8_scaled.safetensors",
             "unconditional_dit": "/m/ideogram4_unconditional_fp8_scaled.safetensors"}
    out = read_musubi({"network_module": "networks.lora_ideogram4", **files}, "lora", notes, issues)
    assert issues == [] and not {"dit", "vae", "unconditional_dit"} & set(out)  # the last: samples only there
    assert (out["pretrained_model_name_or_path"], out["ae"], out["text_encoder"]) == (
        files["dit"], files["vae"], files["text_encoder"])  # ComfyUI's split files (docs/ideogram4.md)
