"""--print-config tells what a run would say; --export-sd-scripts writes a config sd-scripts runs, which loads back
through our loader to the same values."""
from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path

import pytest

from trainers.__main__ import main
from trainers.config_report import print_config
from trainers.core.options import ConfigError, load_config
from trainers.core.options.groups.network import NETWORK_ARG_OPTIONS
from trainers.adapters.kohya.export import SAME, prompt_file_lines, sd_scripts_command
from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.core.options.loading import TrainConfig, Unset
from trainers.demo import build_dataset

CORPUS = Path(__file__).parent / "kohya_corpus"
# What both trainers understand: the same names, plus what the export and the loader translate both ways.
BOTH = SAME | set(NETWORK_ARG_OPTIONS) | {"text_encoder_lr", "unet_lr", "network_args", "noise_offset_type",
                                          "train_text_encoder"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("export")
    model = root / "model"
    (model / "unet").mkdir(parents=True)  # what Validate reads of a model: its configs
    (model / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}', encoding="utf-8")
    (model / "unet" / "config.json").write_text('{"cross_attention_dim": 768}', encoding="utf-8")
    data = build_dataset(root / "data", size=64)
    return {"pretrained_model_name_or_path": str(model), "train_data_dir": str(data), "output_dir": str(root / "out")}


def sets(values: dict[str, object]) -> list[str]:
    return [f"{k}={json.dumps(v)}" for k, v in values.items()]


def round_trip(method: str, source: Path | None, overrides: list[str], tmp_path: Path, family: str) -> TrainConfig:
    cfg = load_config(method, source, overrides)
    argv, text, notes = sd_scripts_command(cfg, family=family, config_path=str(tmp_path / "sd.toml"),
                                           prompts_path=str(tmp_path / "prompts.txt"))
    (tmp_path / "sd.toml").write_text(text, encoding="utf-8")
    (tmp_path / "prompts.txt").write_text("\n".join(prompt_file_lines(cfg)) + "\n", encoding="utf-8")  # as the CLI
    back = load_config(method, tmp_path / "sd.toml", warnings=[])
    both = BOTH - ({"sample_prompts"} if cfg.sample_prompt_lines else set())  # the lines go to a prompts file
    differ = {k: (cfg.values[k], back.values[k]) for k in both if k in cfg.values and cfg.values[k] != back.values[k]}
    assert not differ, differ
    assert argv[:2] == ["accelerate", "launch"] and argv[-2:] == ["--config_file", str(tmp_path / "sd.toml")]
    return back


@pytest.mark.parametrize("source", ["sd_scripts/kohya_ss_lora_locon.toml", "sd_scripts/sections_sd15_lora.toml",
                                    "sd_scripts/sections_easy_scripts_style.toml",
                                    "kohya_ss/test/config/locon-AdamW.json", "kohya_ss/test/config/iA3-Prodigy.json"])
def test_exported_lora_loads_back_to_the_same_values(source: str, tmp_path: Path) -> None:
    round_trip("lora", CORPUS / source, [], tmp_path, "sd1")


@pytest.mark.parametrize("family, script", [("sd1", "train_db.py"), ("sdxl", "sdxl_train.py")])
@pytest.mark.parametrize("train_text_encoder", [True, False])
def test_exported_dreambooth_keeps_whether_the_text_encoder_trains(family: str, script: str, train_text_encoder: bool,
                                                                   tmp_path: Path) -> None:
    values = {"train_text_encoder": train_text_encoder, "text_encoder_lr": 5e-6, "learning_rate": 1e-5,
              "max_train_steps": 100, "reg_data_dir": "/reg", "save_model_as": "safetensors"}
    cfg = load_config("dreambooth", overrides=sets(values))
    argv, text, _ = sd_scripts_command(cfg, family=family)
    assert script in argv
    raw = tomllib.loads(text)
    if script == "train_db.py":  # it trains the text encoder unless told not to
        assert ("stop_text_encoder_training" in raw) is not train_text_encoder
    else:
        assert raw["train_text_encoder"] is train_text_encoder
    path = tmp_path / "db.toml"
    path.write_text(text + ("sdxl = true\n" if family == "sdxl" else ""), encoding="utf-8")
    back = load_config("dreambooth", path)
    assert back.train_text_encoder is train_text_encoder
    if train_text_encoder:
        assert back.text_encoder_lr == 5e-6


def test_export_names_the_script_of_the_family_and_what_it_leaves_out() -> None:
    cfg = load_config("finetune", overrides=sets({"use_ema": "gpu", "max_train_epochs": 1, "save_model_as": "both"}))
    argv, text, notes = sd_scripts_command(cfg, family="sdxl")
    assert "sdxl_train.py" in argv
    assert any(n.startswith("use_ema") for n in notes) and any("'both'" in n for n in notes)
    argv, _, notes = sd_scripts_command(load_config("lora", overrides=["max_train_steps=1"]))
    assert "train_network.py" in argv and any("model family is not known" in n for n in notes)
    _, text, _ = sd_scripts_command(load_config("lora", overrides=["max_train_steps=1", "model_family='sd2'"]))
    assert tomllib.loads(text)["v2"] is True


def test_sample_prompt_lines_become_a_prompts_file_with_our_steps() -> None:
    cfg = load_config("lora", overrides=sets({"max_train_steps": 1, "sample_every_n_steps": 1, "sample_steps": 12,
                                              "sample_prompt_lines": ["a dog --s 4", "a cat"]}))
    _, text, _ = sd_scripts_command(cfg, prompts_path="/x/prompts.txt")
    assert tomllib.loads(text)["sample_prompts"] == "/x/prompts.txt"
    assert prompt_file_lines(cfg) == ["a dog --s 4 --l 7", "a cat --s 12 --l 7"]


def test_print_config_shows_the_config_warnings_and_errors_and_exits_2(tmp_path: Path) -> None:
    out = io.StringIO()
    code = print_config("lora", CORPUS / "kohya_ss/test/config/locon-AdamW.json", [], out=out)
    text = out.getvalue()
    assert code == 2
    assert "[network]" in text and "conv_dim = 16" in text  # the resolved config (LoRA_type 'Kohya LoCon')
    assert "# warning: xformers (sd-scripts) is ignored" in text
    assert "# error: train_data_dir: folder not found: ./test/img" in text
    assert tomllib.loads(text)["network"]["network_dim"] == 16  # the report is comments: still TOML


def test_print_config_of_a_refused_config_lists_the_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["finetune", "--config", str(CORPUS / "sd_scripts/sd3_finetune.toml"), "--print-config"])
    text = capsys.readouterr().out
    assert code == 2 and "option of sd-scripts is not available here" in text and "enable_scaled_pos_embed" in text


def test_print_config_exits_0_when_a_run_could_start(folders: dict[str, str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for kv in sets({**folders, "max_train_steps": 2, "resolution": "64", "min_bucket_reso": 64})
            for a in ("--set", kv)]
    code = main(["lora", "--config", str(CORPUS / "kohya_ss/test/config/locon-AdamW.json"), *args,
                 "--export-sd-scripts", str(tmp_path / "out.toml")])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "0 error(s)" in text and "# accelerate launch" in text and "train_network.py" in text
    assert (tmp_path / "out.toml").exists() and (tmp_path / "out.prompts.txt").exists()


def test_import_kohya_file_gives_the_method_values_and_notes() -> None:
    method, values, notes = import_kohya_file(CORPUS / "kohya_ss/test/config/dreambooth-AdamW.json")
    assert method == "dreambooth" and values["train_text_encoder"] is True and values["text_encoder_lr"] == 1e-5
    assert any("train_db.py" in n for n in notes)
    method, values, notes = import_kohya_file(CORPUS / "sd_scripts/output_config_flat.toml")
    assert method == "lora" and values["model_family"] == "sd2" and values["network_alpha"] == 1.0
    assert any("read as a lora config" in n for n in notes)
    method, values, _ = import_kohya_file(CORPUS / "sd_scripts/sdxl_finetune_dataset_config.toml")
    assert method == "finetune" and values["text_encoder_lr"] == 2e-6 and values["train_text_encoder"] is True


def test_validation_options_go_to_the_lora_scripts_and_are_said_for_the_others() -> None:
    values = {"validation_split": 0.2, "validate_every_n_steps": 50, "validation_seed": 7}
    _, text, _ = sd_scripts_command(load_config("lora", overrides=[f"{k}={v}" for k, v in values.items()]))
    exported = tomllib.loads(text)
    assert {k: exported[k] for k in values} == values
    _, text, notes = sd_scripts_command(load_config("finetune", overrides=["validation_split=0.2"]))
    assert "validation_split" not in tomllib.loads(text)
    assert any("validation_split = 0.2 is left out" in n for n in notes)


def test_a_flux_lora_exports_to_flux_train_network_and_loads_back(tmp_path: Path) -> None:
    """The FLUX corpus TOML (files, flow options, fp8) goes to flux_train_network.py with networks.lora_flux and
    reads back to the same values."""
    round_trip("lora", CORPUS / "sd_scripts/flux_lora.toml", sets({"blocks_to_swap": 4}), tmp_path, "flux")
    argv, text, _ = sd_scripts_command(load_config("lora", CORPUS / "sd_scripts/flux_lora.toml"), family="flux")
    exported = tomllib.loads(text)
    assert any(a.endswith("flux_train_network.py") for a in argv)
    assert exported["network_module"] == "networks.lora_flux" and exported["ae"] == "/models/ae.safetensors"
    assert exported["timestep_sampling"] == "shift" and exported["fp8_base"] is True


CHROMA = {"model_family": "chroma", "pretrained_model_name_or_path": "/m/chroma-unlocked-v50.safetensors",
          "t5xxl": "/m/t5xxl_fp16.safetensors", "ae": "/m/ae.safetensors", "timestep_sampling": "sigmoid",
          "guidance_scale": 0.0, "apply_t5_attn_mask": True, "max_train_steps": 10}
LUMINA = {"model_family": "lumina2", "pretrained_model_name_or_path": "/m/lumina_2_model_bf16.safetensors",
          "text_encoder": "/m/gemma_2_2b.safetensors", "ae": "/m/ae.safetensors",
          "timestep_sampling": "nextdit_shift", "discrete_flow_shift": 6.0, "blocks_to_swap": 4, "max_train_steps": 10}


@pytest.mark.parametrize("method, script", [("lora", "flux_train_network.py"), ("finetune", "flux_train.py")])
def test_a_chroma_config_exports_to_flux_scripts_with_model_type_chroma(method: str, script: str,
                                                                        tmp_path: Path) -> None:
    """sd-scripts trains Chroma with FLUX.1's scripts and model_type = "chroma"; read back, it is Chroma again."""
    back = round_trip(method, None, sets(CHROMA), tmp_path, "chroma")
    argv, text, _ = sd_scripts_command(load_config(method, None, sets(CHROMA)))
    exported = tomllib.loads(text)
    assert argv[-3] == script and exported["model_type"] == "chroma" and back.model_family == "chroma"
    assert (exported["t5xxl"], exported["timestep_sampling"]) == ("/m/t5xxl_fp16.safetensors", "sigmoid")
    assert exported.get("network_module", "networks.lora_flux") == "networks.lora_flux"


@pytest.mark.parametrize("method, script", [("lora", "lumina_train_network.py"), ("finetune", "lumina_train.py")])
def test_a_lumina2_config_exports_to_lumina_scripts_with_their_names(method: str, script: str,
                                                                     tmp_path: Path) -> None:
    """Lumina 2 goes to sd-scripts' Lumina scripts: the Gemma 2 file as gemma2, networks.lora_lumina, and the system
    prompt its captions are read after here (sd-scripts reads them without one unless told); read back, the same."""
    from trainers.models.lumina2.rules import SYSTEM_PROMPT

    back = round_trip(method, None, sets(LUMINA), tmp_path, "lumina2")
    argv, text, notes = sd_scripts_command(load_config(method, None, sets(LUMINA)))
    exported = tomllib.loads(text)
    assert argv[-3] == script and back.model_family == "lumina2"
    assert (exported["gemma2"], exported["ae"], exported["system_prompt"]) == (
        "/m/gemma_2_2b.safetensors", "/m/ae.safetensors", SYSTEM_PROMPT)
    assert "text_encoder" not in exported and exported["timestep_sampling"] == "nextdit_shift"
    assert exported.get("network_module", "networks.lora_lumina") == "networks.lora_lumina"
    assert not {"guidance_scale", "t5xxl", "apply_t5_attn_mask"} & set(exported) and not notes
    folder = {**LUMINA, "pretrained_model_name_or_path": "/m/Lumina-Image-2.0", "text_encoder": "", "ae": ""}
    _, _, notes = sd_scripts_command(load_config(method, None, sets(folder)))
    assert any(f"{script} reads Lumina 2 from its single files" in note for note in notes)


@pytest.mark.parametrize("family, title", [("zimage", "Z-Image"), ("qwen_image", "Qwen-Image"),
                                           ("qwen_image_edit", "Qwen-Image-Edit"), ("flux2", "FLUX.2"),
                                           ("krea2", "Krea 2"), ("flux_kontext", "FLUX.1 Kontext")])
def test_families_sd_scripts_does_not_train_are_refused_naming_musubi_tuner(family: str, title: str) -> None:
    for method in ("lora", "finetune"):
        with pytest.raises(ConfigError) as err:
            sd_scripts_command(load_config(method, None, sets({"model_family": family})))
        (issue,) = err.value.issues
        assert f"sd-scripts does not train {title} models" in issue.message and "musubi-tuner" in issue.message


def test_an_export_carries_only_what_the_family_s_script_reads() -> None:
    """SD1.x/SDXL scripts read none of the SD3/FLUX options, and sd-scripts' SD3/FLUX trainers none of the noise
    and loss settings of SD models (a value other than the default is said to be left out)."""
    flow_only = {"timestep_sampling", "sigmoid_scale", "discrete_flow_shift", "model_prediction_type",
                 "guidance_scale", "weighting_scheme", "logit_mean", "logit_std", "mode_scale", "training_shift",
                 "apply_t5_attn_mask", "apply_lg_attn_mask", "text_encoder_max_tokens", "clip_l", "clip_g", "t5xxl",
                 "ae", "blocks_to_swap"}
    cfg = load_config("lora", overrides=["max_train_steps=10", "min_snr_gamma=5", "noise_offset=0.05"])
    for family in ("sd1", "sdxl", None):
        _, text, _ = sd_scripts_command(cfg, family=family)
        assert not flow_only & set(tomllib.loads(text)), family
    _, text, _ = sd_scripts_command(cfg, family="sd1")
    assert "cache_text_encoder_outputs" not in tomllib.loads(text)  # train_network.py (SD1.x) has no such cache
    assert "cache_text_encoder_outputs" in tomllib.loads(sd_scripts_command(cfg, family="sdxl")[1])
    _, text, notes = sd_scripts_command(cfg, family="flux")
    exported = tomllib.loads(text)
    assert {"timestep_sampling", "guidance_scale", "weighting_scheme"} <= set(exported)
    assert not {"training_shift", "apply_lg_attn_mask", "min_snr_gamma", "noise_offset", "clip_skip"} & set(exported)
    assert "min_snr_gamma = 5.0 is left out: flux_train_network.py does not read it" in notes
    exported = tomllib.loads(sd_scripts_command(cfg, family="sd3")[1])
    assert {"training_shift", "apply_lg_attn_mask", "weighting_scheme"} <= set(exported)
    assert not {"timestep_sampling", "guidance_scale", "min_snr_gamma"} & set(exported)


def test_unset_reads_an_option_as_if_the_config_did_not_set_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    ours = tmp_path / "ours.toml"
    ours.write_text('schema_version = 1\nmethod = "lora"\n[optimizer]\nmax_train_epochs = 10\nlearning_rate = 0.5\n',
                    encoding="utf-8")
    code = main(["lora", "--config", str(ours), "--unset", "max_train_epochs", "--set", "max_train_steps=7",
                 "--unset", "learning_rate", "--print-config"])
    printed = tomllib.loads(capsys.readouterr().out)["optimizer"]
    assert code == 2 and "max_train_epochs" not in printed and printed["max_train_steps"] == 7
    assert printed["learning_rate"] == 1e-4  # Atelier's default
    sd = load_config("lora", CORPUS / "sd_scripts/sections_sd15_lora.toml", overrides=[Unset("learning_rate")])
    assert sd.learning_rate == 2e-6  # an sd-scripts file: sd-scripts' default
    last = load_config("lora", ours, overrides=[Unset("learning_rate"), "learning_rate=0.25"])
    assert last.learning_rate == 0.25  # in command-line order
    with pytest.raises(ConfigError) as err:
        load_config("lora", ours, overrides=[Unset("learning_rat")])
    assert "did you mean 'learning_rate'" in str(err.value)


def test_print_config_of_an_sd_scripts_file_whose_prompts_file_is_missing_exits_0(
        folders: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sd.toml"
    config.write_text('network_module = "networks.lora"\nmax_train_steps = 2\nresolution = "64"\n'
                      'min_bucket_reso = 64\nsample_prompts = "/gone/prompts.txt"\nsample_every_n_steps = 1\n',
                      encoding="utf-8")
    args = [a for kv in sets(folders) for a in ("--set", kv)]
    code = main(["lora", "--config", str(config), *args, "--print-config"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "# warning: sample_prompts: file not found: /gone/prompts.txt" in text and "samples are off" in text
