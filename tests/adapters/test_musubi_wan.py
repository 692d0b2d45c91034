"""musubi-tuner's Wan training configs (docs/wan.md's wan_train_network.py examples as --config_file TOMLs) read as
Atelier's options: networks.lora_wan with its task names the family (Wan 2.1, or the Wan 2.2 A14B pair and which
expert it trains), musubi's names of the same meaning pass (timestep_boundary, discrete_flow_shift, fp8_base,
blocks_to_swap), fp8_t5 is read as text_encoder_precision, and what cannot be honoured is refused by name (its model
files, other tasks, offload_inactive_dit). Its video dataset TOML is kept for the video family."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.adapters.musubi.options import is_musubi_file, read_musubi
from trainers.core.errors import ConfigError

# docs/wan.md's training example (its model files left out), as a --config_file TOML
WAN_LORA = """
task = "t2v-1.3B"
network_module = "networks.lora_wan"
network_dim = 32
mixed_precision = "bf16"
sdpa = true
fp8_base = true
optimizer_type = "adamw8bit"
learning_rate = 2e-4
gradient_checkpointing = true
max_data_loader_n_workers = 2
persistent_data_loader_workers = true
timestep_sampling = "shift"
discrete_flow_shift = 3.0
max_train_epochs = 16
save_every_n_epochs = 1
seed = 42
output_dir = "/tmp/out"
output_name = "wan-lora"
"""


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "musubi.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_wan21_lora_config_reads_with_musubis_meaning(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, WAN_LORA + "blocks_to_swap = 10\nfp8_t5 = true\n"))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("wan21", "networks.lora")
    assert values["pretrained_model_name_or_path"] == "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"  # the task's folder
    assert (values["timestep_sampling"], values["discrete_flow_shift"]) == ("shift", 3.0)
    assert (values["fp8_base"], values["blocks_to_swap"], values["text_encoder_precision"]) == (True, 10, "fp8")
    assert values["network_alpha"] == 1.0  # musubi-tuner's default, not ours
    assert any("task = 't2v-1.3B'" in n for n in notes)


def test_an_i2v_14b_config_names_wan21_i2v() -> None:
    out = read_musubi({"task": "i2v-14B", "network_module": "networks.lora_wan"}, "lora", [], [])
    assert (out["model_family"], out["pretrained_model_name_or_path"]) == (
        "wan21_i2v", "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers")


def test_a_ti2v_5b_config_names_the_5b_and_reads_its_files() -> None:
    issues: list = []
    out = read_musubi({"task": "ti2v-5B", "network_module": "networks.lora_wan", "timestep_boundary": 875,
                       "dit": "/m/wan2.2_ti2v_5B_fp16.safetensors", "t5": "/m/umt5.safetensors",
                       "vae": "/m/vae22.safetensors"}, "lora", [], issues)
    assert issues == [] and out["model_family"] == "wan22_ti2v" and "timestep_boundary" not in out  # one model
    assert (out["pretrained_model_name_or_path"], out["text_encoder"], out["ae"]) == (
        "/m/wan2.2_ti2v_5B_fp16.safetensors", "/m/umt5.safetensors", "/m/vae22.safetensors")
    out = read_musubi({"task": "ti2v-5B", "network_module": "networks.lora_wan"}, "lora", [], issues)
    assert out["pretrained_model_name_or_path"] == "Wan-AI/Wan2.2-TI2V-5B-Diffusers" and issues == []
    read_musubi({"task": "ti2v-5B", "network_module": "networks.lora_wan", "clip": "/m/clip.pth"}, "lora", [], issues)
    assert [i.field for i in issues] == ["clip"]  # Wan 2.1 I2V's file


def test_an_a14b_config_with_both_experts_trains_both() -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"task": "t2v-A14B", "network_module": "networks.lora_wan", "timestep_boundary": 900,
                       "pretrained_model_name_or_path": "/m/wan22"}, "lora", notes, issues)
    assert issues == [] and out["model_family"] == "wan22" and out["timestep_boundary"] == 900
    assert "train_expert" not in out  # ours defaults to both; musubi's both needs dit_high_noise (a file)
    issues = []
    out = read_musubi({"task": "i2v-A14B", "network_module": "networks.lora_wan", "dit": "/m/low.safetensors",
                       "dit_high_noise": "/m/high.safetensors", "t5": "/m/umt5.safetensors",
                       "vae": "/m/wan_2.1_vae.safetensors", "offload_inactive_dit": True}, "lora", notes, issues)
    assert out["train_expert"] == "both" and issues == []  # the pair's files are read as its single files
    assert (out["pretrained_model_name_or_path"], out["dit_high_noise"], out["text_encoder"], out["ae"]) == (
        "/m/low.safetensors", "/m/high.safetensors", "/m/umt5.safetensors", "/m/wan_2.1_vae.safetensors")
    assert out["offload_inactive_dit"] is True  # musubi-tuner's option, and ours


@pytest.mark.parametrize("timesteps, expert", [({"min_timestep": 875}, "high_noise"),
                                               ({"max_timestep": 875}, "low_noise")])
def test_one_a14b_expert_is_told_by_its_timestep_range(timesteps: dict[str, int], expert: str) -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"task": "t2v-A14B", "network_module": "networks.lora_wan", "dit": "/m/one.safetensors",
                       **timesteps}, "lora", notes, issues)
    assert out["train_expert"] == expert and "min_timestep" not in out and "max_timestep" not in out
    assert [i.field for i in issues] == ["dit"] and "dit_high_noise" in issues[0].message  # one expert's file
    issues = []
    read_musubi({"task": "t2v-A14B", "network_module": "networks.lora_wan", "dit": "/m/one.safetensors"}, "lora",
                notes, issues)
    assert sorted(i.field for i in issues) == ["dit", "train_expert"]


@pytest.mark.parametrize("line, field", [
    ('task = "flf2v-14B"', "task"),
    ('task = "t2v-14B-FC"', "task"),
    ('clip = "/m/models_clip.pth"', "clip"),
    ("force_v2_1_time_embedding = true", "force_v2_1_time_embedding"),
    ("fp8_scaled = true", "fp8_scaled"),
])
def test_what_cannot_be_honoured_is_refused_by_name(tmp_path: Path, line: str, field: str) -> None:
    text = "\n".join(x for x in WAN_LORA.splitlines() if x.split(" = ")[0] != line.split(" = ")[0])
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, text + "\n" + line + "\n"))
    assert [issue.field for issue in err.value.issues] == [field]


def test_wan21_t2vs_model_files_are_read_as_its_single_files() -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"task": "t2v-1.3B", "network_module": "networks.lora_wan",
                       "dit": "/m/wan2.1_t2v_1.3B_bf16.safetensors", "t5": "/m/models_t5_umt5-xxl-enc-bf16.pth",
                       "vae": "/m/Wan2.1_VAE.pth"}, "lora", notes, issues)
    assert issues == [] and not {"dit", "t5", "vae"} & set(out)
    assert (out["pretrained_model_name_or_path"], out["text_encoder"], out["ae"]) == (
        "/m/wan2.1_t2v_1.3B_bf16.safetensors", "/m/models_t5_umt5-xxl-enc-bf16.pth", "/m/Wan2.1_VAE.pth")
    assert any("vae (musubi-tuner) is read as ae" in n for n in notes)
    assert not any("its published diffusers folder" in n for n in notes)
    out = read_musubi({"task": "i2v-14B", "network_module": "networks.lora_wan", "dit": "/m/wan2.1_i2v.safetensors",
                       "clip": "/m/models_clip.pth"}, "lora", [], issues)
    assert issues == [] and out["clip"] == "/m/models_clip.pth"  # Wan 2.1 I2V's CLIP image encoder file


def test_its_video_dataset_config_is_kept_and_speed_options_left_out(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset.toml"
    dataset.write_text('[general]\nresolution = [960, 544]\n\n[[datasets]]\nvideo_directory = "/data/clips"\n'
                       'target_frames = [1, 25, 45]\nframe_extraction = "head"\n', encoding="utf-8")
    assert is_musubi_file({"network_module": "networks.lora_wan"}) and is_musubi_file({"dit_high_noise": "x"})
    _, values, notes = import_kohya_file(_toml(tmp_path, WAN_LORA + f'dataset_config = "{dataset}"\n'
                                               "vae_cache_cpu = true\n"))
    assert values["dataset_config"] == str(dataset)
    assert any("vae_cache_cpu" in n for n in notes) and "vae_cache_cpu" not in values


def test_an_image_dataset_config_is_kept_for_wan_and_refused_for_an_image_family(tmp_path: Path) -> None:
    """A video family reads musubi-tuner's image datasets as 1-frame clips (tests/models/test_wan22.py runs one)."""
    dataset = tmp_path / "images.toml"
    dataset.write_text('[general]\nresolution = [960, 544]\n\n[[datasets]]\nimage_directory = "/data/img"\n',
                       encoding="utf-8")
    _, values, _ = import_kohya_file(_toml(tmp_path, WAN_LORA + f'dataset_config = "{dataset}"\n'))
    assert values["dataset_config"] == str(dataset)
    issues: list = []
    read_musubi({"network_module": "networks.lora_zimage", "dataset_config": str(dataset)}, "lora", [], issues)
    assert [i.field for i in issues] == ["dataset_config"]
