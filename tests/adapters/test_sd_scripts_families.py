"""sd-scripts' Chroma and Lumina Image 2.0 configs (flux_train_network.py with model_type = 'chroma',
lumina_train_network.py) read as Atelier's options: the family from their keys, what cannot be honoured refused by
name."""
from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from config_files import write_toml

from trainers.core.errors import ConfigError
from trainers.adapters.kohya.page_import import import_kohya_file

# sd-scripts' docs/lumina_train_network.md example as a --config_file TOML (its model files left out)
LUMINA_LORA = """
network_module = "networks.lora_lumina"
network_dim = 8
network_alpha = 8
learning_rate = 1e-4
optimizer_type = "AdamW"
lr_scheduler = "constant"
mixed_precision = "bf16"
max_train_epochs = 10
save_every_n_epochs = 1
gradient_checkpointing = true
cache_latents = true
cache_text_encoder_outputs = true
use_flash_attn = true
gemma2_max_token_length = 256
"""

# sd-scripts' docs/flux_train_network.md Chroma example (its model files left out)
CHROMA_LORA = """
model_type = "chroma"
network_module = "networks.lora_flux"
network_dim = 16
learning_rate = 1e-4
apply_t5_attn_mask = true
guidance_scale = 0.0
timestep_sampling = "sigmoid"
model_prediction_type = "raw"
max_train_steps = 100
"""


_toml = partial(write_toml, name="sd-scripts.toml")


def test_a_lumina_lora_config_reads_as_lumina_2_with_sd_scripts_defaults(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, LUMINA_LORA))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("lumina2", "networks.lora")
    assert (values["timestep_sampling"], values["discrete_flow_shift"], values["model_prediction_type"]) == \
        ("shift", 6.0, "raw")
    assert any("system prompt" in n for n in notes) and any("use_flash_attn" in n for n in notes)
    _, values, _ = import_kohya_file(_toml(tmp_path, LUMINA_LORA + 'timestep_sampling = "nextdit_shift"\n'))
    assert values["timestep_sampling"] == "nextdit_shift"  # sd-scripts' advice for Lumina 2


def test_lumina_model_files_are_read_as_the_split_files_options(tmp_path: Path) -> None:
    files = ('pretrained_model_name_or_path = "/models/lumina_2.safetensors"\n'
             'gemma2 = "/models/gemma_2_2b_fp16.safetensors"\nae = "/models/ae.safetensors"\n')
    _, values, notes = import_kohya_file(_toml(tmp_path, LUMINA_LORA + files))
    assert (values["text_encoder"], values["ae"]) == ("/models/gemma_2_2b_fp16.safetensors", "/models/ae.safetensors")
    assert "gemma2" not in values and any("read as text_encoder" in n for n in notes)


@pytest.mark.parametrize("line, field", [
    ("gemma2_max_token_length = 512", "gemma2_max_token_length"),
    ('system_prompt = "You are an assistant designed to generate high-quality images based on user prompts."',
     "system_prompt"),
])
def test_lumina_keys_that_cannot_be_honoured_are_refused_by_name(tmp_path: Path, line: str, field: str) -> None:
    text = "\n".join(x for x in LUMINA_LORA.splitlines() if x.split(" = ")[0] != line.split(" = ")[0])
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, text + "\n" + line + "\n"))
    assert [issue.field for issue in err.value.issues] == [field]


def test_a_chroma_config_reads_as_chroma(tmp_path: Path) -> None:
    method, values, _ = import_kohya_file(_toml(tmp_path, CHROMA_LORA))
    assert method == "lora"
    assert (values["model_family"], values["network_module"], values["guidance_scale"]) == \
        ("chroma", "networks.lora", 0.0)


def test_another_model_type_is_still_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        import_kohya_file(_toml(tmp_path, CHROMA_LORA.replace('"chroma"', '"flux2"')))
    assert [issue.field for issue in err.value.issues] == ["model_type"]


# sd-scripts' docs/hunyuan_image_train_network.md example as a --config_file TOML, with its 24 GB advice (fp8_scaled,
# blocks_to_swap 9) and fp8_vl
HUNYUAN_LORA = """
pretrained_model_name_or_path = "/models/hunyuanimage2.1.safetensors"
text_encoder = "/models/qwen_2.5_vl_7b.safetensors"
byt5 = "/models/byt5_small_glyphxl_fp16.safetensors"
vae = "/models/hunyuan_image_2.1_vae_fp16.safetensors"
network_module = "networks.lora_hunyuan_image"
network_dim = 16
network_alpha = 1
network_train_unet_only = true
learning_rate = 1e-4
optimizer_type = "AdamW8bit"
lr_scheduler = "constant"
attn_mode = "torch"
split_attn = true
max_train_epochs = 10
mixed_precision = "bf16"
gradient_checkpointing = true
model_prediction_type = "raw"
fp8_scaled = true
fp8_vl = true
blocks_to_swap = 9
cache_text_encoder_outputs = true
cache_latents = true
"""


def test_a_hunyuan_image_lora_config_reads_as_hunyuan_image_21_with_sd_scripts_defaults(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, HUNYUAN_LORA))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("hunyuan_image21", "networks.lora")
    assert (values["timestep_sampling"], values["discrete_flow_shift"], values["model_prediction_type"]) == \
        ("sigma", 5.0, "raw")
    assert (values["fp8_base"], values["text_encoder_precision"], values["blocks_to_swap"]) == (True, "fp8", 9)
    assert not {"attn_mode", "split_attn"} & set(values) and values["vae"] == ""
    assert (values["text_encoder"], values["byt5"], values["ae"]) == (
        "/models/qwen_2.5_vl_7b.safetensors", "/models/byt5_small_glyphxl_fp16.safetensors",
        "/models/hunyuan_image_2.1_vae_fp16.safetensors")  # read beside the DiT file
    assert any("read as ae" in n for n in notes) and any("attn_mode" in n for n in notes)
    folder = HUNYUAN_LORA.replace("/models/hunyuanimage2.1.safetensors", "/models/HunyuanImage-2.1-Diffusers")
    _, values, notes = import_kohya_file(_toml(tmp_path, folder))
    assert values["text_encoder"] == values["vae"] == values["byt5"] == ""
    assert any("split files) left out" in n for n in notes)
    _, values, _ = import_kohya_file(_toml(tmp_path, HUNYUAN_LORA + "discrete_flow_shift = 3.0\n"))
    assert values["discrete_flow_shift"] == 3.0
