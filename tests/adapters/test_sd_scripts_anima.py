"""sd-scripts' Anima configs (anima_train_network.py with networks.lora_anima, anima_train.py) read as Atelier's:
its file options under our names, its defaults, what it reads that Atelier does not named."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.core.options import ConfigError
from trainers.core.options.loading import load_config

# sd-scripts' docs/anima_train_network.md example command as a --config_file TOML
ANIMA_LORA = """
pretrained_model_name_or_path = "/m/split_files/diffusion_models/anima-preview.safetensors"
qwen3 = "/m/split_files/text_encoders/qwen_3_06b_base.safetensors"
vae = "/m/split_files/vae/qwen_image_vae.safetensors"
train_data_dir = "/d"
output_dir = "/o"
output_name = "my_anima_lora"
save_model_as = "safetensors"
network_module = "networks.lora_anima"
network_dim = 8
learning_rate = 1e-4
optimizer_type = "AdamW8bit"
lr_scheduler = "constant"
max_train_epochs = 10
save_every_n_epochs = 1
mixed_precision = "bf16"
gradient_checkpointing = true
cache_latents = true
cache_text_encoder_outputs = true
vae_chunk_size = 64
vae_disable_cache = true
network_args = ["train_llm_adapter=True"]
"""


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "anima.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_an_anima_lora_config_reads_as_anima_with_its_files_and_sd_scripts_defaults(tmp_path: Path) -> None:
    method, values, notes = import_kohya_file(_toml(tmp_path, ANIMA_LORA))
    assert method == "lora"
    assert (values["model_family"], values["network_module"]) == ("anima", "networks.lora")
    assert (values["text_encoder"], values["ae"], values["vae"]) == (
        "/m/split_files/text_encoders/qwen_3_06b_base.safetensors", "/m/split_files/vae/qwen_image_vae.safetensors",
        "")
    assert (values["timestep_sampling"], values["discrete_flow_shift"]) == ("sigmoid", 1.0)  # its argparse defaults
    assert values["network_args"] == ["train_llm_adapter=True"]
    assert any("read as text_encoder" in n for n in notes) and any("vae_chunk_size" in n for n in notes)
    assert load_config("lora", _toml(tmp_path, ANIMA_LORA)).model_family == "anima"


def test_an_anima_finetune_config_is_told_by_its_qwen3_file_and_keeps_its_own_options(tmp_path: Path) -> None:
    text = (ANIMA_LORA.replace('network_module = "networks.lora_anima"\n', "").replace("network_dim = 8\n", "")
            .replace('network_args = ["train_llm_adapter=True"]\n', "")
            + 'llm_adapter_path = "/m/adapter.safetensors"\nt5_tokenizer_path = "/m/t5_old"\n'
              "qwen3_max_token_length = 512\ntimestep_sampling = \"shift\"\ndiscrete_flow_shift = 3.0\n")
    method, values, _ = import_kohya_file(_toml(tmp_path, text))
    assert values["model_family"] == "anima"
    assert (values["llm_adapter_path"], values["t5_tokenizer_path"]) == ("/m/adapter.safetensors", "/m/t5_old")
    assert (values["timestep_sampling"], values["discrete_flow_shift"]) == ("shift", 3.0)


@pytest.mark.parametrize("line, key", [("qwen3_max_token_length = 256", "qwen3_max_token_length"),
                                       ("llm_adapter_lr = 1e-5", "llm_adapter_lr"),
                                       ("qwen_image_vae_2d = true", "qwen_image_vae_2d")])
def test_what_atelier_does_not_honour_in_an_anima_config_is_refused_by_name(tmp_path: Path, line: str,
                                                                             key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("lora", _toml(tmp_path, ANIMA_LORA + line + "\n"))
    assert [issue.field for issue in err.value.issues] == [key]


@pytest.mark.parametrize("preset, method, script", [("anima_lora_16gb", "lora", "anima_train_network.py"),
                                                    ("anima_finetune_24gb", "finetune", "anima_train.py")])
def test_an_anima_config_exports_to_sd_scripts_and_reads_back_the_same(tmp_path: Path, preset: str, method: str,
                                                                       script: str) -> None:
    from trainers.adapters.kohya.export import sd_scripts_command

    presets = Path(__file__).resolve().parents[2] / "presets"
    files = ['pretrained_model_name_or_path="/m/anima.safetensors"', 'text_encoder="/m/qwen_3_06b_base.safetensors"',
             'ae="/m/qwen_image_vae.safetensors"', 'train_data_dir="/d"', 'output_dir="/o"']
    cfg = load_config(method, presets / f"{preset}.toml", files)
    argv, text, _ = sd_scripts_command(cfg, family="anima", config_path=str(tmp_path / "sd.toml"))
    assert script in argv
    assert 'qwen3 = "/m/qwen_3_06b_base.safetensors"' in text and 'vae = "/m/qwen_image_vae.safetensors"' in text
    path = _toml(tmp_path, text)
    back = load_config(method, path)
    changed = {k for k in cfg.values if cfg.values[k] != back.values.get(k)}
    assert changed <= {"sample_steps", "sample_cfg_scale"}  # given per prompt line in sd-scripts
