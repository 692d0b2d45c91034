"""musubi-tuner's HunyuanVideo 1.5 training configs (docs/hunyuan_video_1_5.md's hv_1_5_train_network.py examples
as --config_file TOMLs) read as Atelier's options: networks.lora_hv_1_5 with its task names the family and the
published folder, musubi's names of the same meaning pass (timestep_sampling, discrete_flow_shift, fp8_base,
blocks_to_swap), and what cannot be honoured is refused by name (its model files, another task, a folder of the other
task)."""
from __future__ import annotations

import json
from pathlib import Path

from config_files import write_toml as _toml

from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.adapters.musubi.options import is_musubi_file, read_musubi

# docs/hunyuan_video_1_5.md's T2V training example (its model files left out), as a --config_file TOML
HV15_LORA = """
task = "t2v"
network_module = "networks.lora_hv_1_5"
network_dim = 32
mixed_precision = "bf16"
sdpa = true
timestep_sampling = "shift"
weighting_scheme = "none"
discrete_flow_shift = 2.0
optimizer_type = "adamw8bit"
learning_rate = 1e-4
gradient_checkpointing = true
max_data_loader_n_workers = 2
persistent_data_loader_workers = true
max_train_epochs = 16
save_every_n_epochs = 1
seed = 42
output_dir = "/tmp/out"
output_name = "hv15-lora"
"""


def test_a_t2v_lora_config_reads_with_musubis_meaning(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, HV15_LORA + "blocks_to_swap = 20\nfp8_base = true\n"
                                                    "vae_sample_size = 256\n"))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("hunyuan_video15", "networks.lora")
    assert values["pretrained_model_name_or_path"] == "hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v"
    assert (values["timestep_sampling"], values["discrete_flow_shift"], values["weighting_scheme"]) == (
        "shift", 2.0, "none")
    assert (values["fp8_base"], values["blocks_to_swap"], values["network_dim"]) == (True, 20, 32)
    assert values["network_alpha"] == 1.0  # musubi-tuner's default, not ours
    assert any("task = 't2v'" in n for n in notes) and any("vae_sample_size" in n for n in notes)


def test_its_byt5_file_still_tells_a_musubi_config() -> None:
    """sd-scripts' HunyuanImage 2.1 files have a byt5 key too: musubi-tuner's networks.lora_hv_1_5 tells them apart."""
    assert is_musubi_file({"network_module": "networks.lora_hv_1_5", "byt5": "/m/byt5.safetensors"})
    assert not is_musubi_file({"network_module": "networks.lora_hunyuan_image", "byt5": "/m/byt5.safetensors"})


def test_the_i2v_task_names_its_folder_and_its_model_files_are_read_as_the_single_files() -> None:
    notes: list[str] = []
    issues: list = []
    out = read_musubi({"task": "i2v", "network_module": "networks.lora_hv_1_5"}, "lora", notes, issues)
    assert out["pretrained_model_name_or_path"] == "hunyuanvideo-community/HunyuanVideo-1.5-480p_i2v" and not issues
    files = {"dit": "/m/dit.safetensors", "vae": "/m/vae.safetensors", "text_encoder": "/m/qwen.safetensors",
             "byt5": "/m/byt5.safetensors", "image_encoder": "/m/siglip.safetensors"}
    out = read_musubi({"task": "i2v", "network_module": "networks.lora_hv_1_5", **files}, "lora", notes, issues)
    assert issues == [] and "dit" not in out and "vae" not in out
    assert (out["pretrained_model_name_or_path"], out["ae"], out["text_encoder"], out["byt5"], out["image_encoder"]) \
        == tuple(files.values())
    for task, given in (("t2v", files), ("i2v", {k: v for k, v in files.items() if k != "image_encoder"})):
        issues = []
        read_musubi({"task": task, "network_module": "networks.lora_hv_1_5", **given}, "lora", [], issues)
        assert [i.field for i in issues] == ["image_encoder"] and f"task = '{task}'" in issues[0].message
    issues = []
    read_musubi({"task": "v2v", "network_module": "networks.lora_hv_1_5"}, "lora", [], issues)
    assert [i.field for i in issues] == ["task"] and "'t2v', 'i2v'" in issues[0].message


def test_a_folder_of_the_other_task_is_refused_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "t2v"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "HunyuanVideo15Pipeline"}))
    issues: list = []
    read_musubi({"task": "i2v", "network_module": "networks.lora_hv_1_5",
                 "pretrained_model_name_or_path": str(folder)}, "lora", [], issues)
    assert [i.field for i in issues] == ["task"] and "text-to-video folder" in issues[0].message
    issues = []
    read_musubi({"task": "t2v", "network_module": "networks.lora_hv_1_5",
                 "pretrained_model_name_or_path": str(folder)}, "lora", [], issues)
    assert issues == []
