"""Checks that depend on the model, before any weight loads: `--print-config`, the GUI's Validate and the run refuse
the same configs for the same reasons (trainers/models/checks.py `model_issues`, reached through
trainers/preflight/validate.py), naming the option, the path, what it holds and what is expected. Torch-free."""
from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from gui.checks import check_form
from trainers.config_report import print_config
from trainers.core.errors import ConfigError
from trainers.core.options import config_from_dict
from trainers.demo import build_dataset
from trainers.preflight.validate import check

REPO = Path(__file__).resolve().parents[2]
SD1_WIDTH = 768  # an SD1 UNet's cross-attention width: what tells an LDM UNet-only file's family


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tiny_sd1_dir: Path) -> dict:
    tmp = tmp_path_factory.mktemp("model_checks")
    data = build_dataset(tmp / "data", folder="3_sks shape")
    return {"pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data),
            "output_dir": str(tmp / "out"), "max_train_epochs": 1, "resolution": "64"}


def _unet_only_file(folder: Path) -> Path:
    """An SD1 single file (LDM layout) that holds the UNet alone: no text encoder, no VAE."""
    path = folder / "unet-only.safetensors"
    unet = "model.diffusion_model."
    save_file({unet + "input_blocks.0.0.weight": torch.zeros(8, 4, 3, 3),
               unet + "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": torch.zeros(8, SD1_WIDTH)}, path)
    return path


def _vae_of_16_channels(folder: Path) -> Path:
    vae = folder / "flux-like-vae"
    vae.mkdir(exist_ok=True)
    (vae / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", "latent_channels": 16}))
    save_file({"decoder.conv_in.weight": torch.zeros(1)}, vae / "diffusion_pytorch_model.safetensors")
    return vae


def _cut(path: Path, keep: int = 40) -> Path:
    """`path` with its last bytes gone, as an interrupted download leaves it (its header still whole)."""
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - keep])
    return path


def _cut_model(model: Path, tmp: Path) -> tuple[Path, Path]:
    """A copy of the diffusers `model` whose UNet and VAE weights are cut short, and the UNet's file."""
    copy = tmp / "cut model"
    if not copy.exists():
        shutil.copytree(model, copy)
        _cut(copy / "unet" / "diffusion_pytorch_model.safetensors")
        _cut(copy / "vae" / "diffusion_pytorch_model.safetensors")
    return copy, copy / "unet" / "diffusion_pytorch_model.safetensors"


def _cases(base: dict, tmp: Path) -> dict[str, tuple[dict, str, list[str]]]:
    """name -> (changed options, the option named, words its message must have)."""
    model = Path(base["pretrained_model_name_or_path"])
    (tmp / "empty").mkdir(exist_ok=True)
    cut_model, cut_unet = _cut_model(model, tmp)
    cut_file = tmp / "cut single file.safetensors"
    if not cut_file.exists():
        save_file({"model.diffusion_model.input_blocks.0.0.weight": torch.zeros(8, 4, 3, 3)}, cut_file)
        _cut(cut_file)
    return {
        "a single file cut short as the model": ({"pretrained_model_name_or_path": str(cut_file)},
                                                  "pretrained_model_name_or_path", [str(cut_file), "cut short"]),
        "a diffusers folder with cut weights": ({"pretrained_model_name_or_path": str(cut_model)},
                                                "pretrained_model_name_or_path", [str(cut_unet), "cut short"]),
        "a VAE folder with cut weights": ({"vae": str(cut_model / "vae")}, "vae", [str(cut_model / "vae"),
                                                                                 "cut short"]),
        "an SDXL config on an SD1 model": ({"model_family": "sdxl"}, "model_family",
                                           ["'sdxl'", str(model), "SD1.x"]),
        "clip_skip beyond the text encoder": ({"clip_skip": 3}, "clip_skip", ["3", "2 layers"]),
        "a FLUX option on an SD1 model": ({"timestep_sampling": "shift"}, "timestep_sampling", ["SD1.x"]),
        "a FLUX network arg on an SD1 model": ({"network_args": ["train_blocks=single"]}, "network_args",
                                               ["train_blocks", "FLUX.1"]),
        "a FLUX component file on an SD1 model": ({"t5xxl": str(_unet_only_file(tmp))}, "t5xxl", ["not read"]),
        "the model's unet/ as the model": ({"pretrained_model_name_or_path": str(model / "unet")},
                                           "pretrained_model_name_or_path",
                                           [str(model / "unet"), "UNet2DConditionModel", "model_index.json"]),
        "a diffusers UNet file as the model": (
            {"pretrained_model_name_or_path": str(next((model / "unet").glob("*.safetensors")))},
            "pretrained_model_name_or_path", ["component of a diffusers model"]),
        "a UNet-only single file as the model": ({"pretrained_model_name_or_path": str(_unet_only_file(tmp))},
                                                 "pretrained_model_name_or_path", ["unet-only.safetensors",
                                                                                   "text encoder"]),
        "an empty folder as the vae": ({"vae": str(tmp / "empty")}, "vae",
                                       [str(tmp / "empty"), "empty folder", "AutoencoderKL"]),
        "the dataset as the vae": ({"vae": base["train_data_dir"]}, "vae",
                                   [base["train_data_dir"], "images", "AutoencoderKL"]),
        "the model's unet/ as the vae": ({"vae": str(model / "unet")}, "vae",
                                         ["UNet2DConditionModel", "not a VAE"]),
        "the whole model as the vae": ({"vae": str(model)}, "vae", [str(model / "vae")]),
        "a VAE of another latent size": ({"vae": str(_vae_of_16_channels(tmp))}, "vae", ["16 latent channels"]),
    }


def _fields(issues) -> set[str]:
    return {issue.field for issue in issues}


def _printed(values: dict, tmp: Path) -> tuple[int, str]:
    config = tmp / "config.toml"
    config_from_dict("lora", values).save(config)
    out = io.StringIO()
    code = print_config("lora", config, [], out=out)
    return code, out.getvalue()


def test_print_config_validate_and_the_run_refuse_the_same_model_problems(base: dict, tmp_path: Path) -> None:
    assert _printed(base, tmp_path)[0] == 0 and check_form("lora", base).ok
    failures = []
    for name, (changes, field, words) in _cases(base, tmp_path).items():
        values = {**base, **changes}
        code, printed = _printed(values, tmp_path)
        report = check_form("lora", values)
        with pytest.raises(ConfigError) as refused:  # what the run's start (trainers/train/session.py) calls
            check(config_from_dict("lora", values))
        run_fields = _fields(refused.value.issues)
        message = next((i.message for i in refused.value.issues if i.field == field), "")
        if code != 2 or f"# error: {field}: " not in printed:
            failures.append(f"{name}: --print-config exits {code} without naming {field}")
        if report.ok or field not in _fields(report.issues):
            failures.append(f"{name}: Validate does not name {field}: {report.summary()}")
        if run_fields != _fields(report.issues):
            failures.append(f"{name}: the run names {run_fields}, Validate {_fields(report.issues)}")
        missing = [w for w in words if w not in message]
        if missing:
            failures.append(f"{name}: the message lacks {missing}: {message}")
    assert not failures, "\n".join(failures)


def test_the_run_refuses_before_loading_the_model(base: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m trainers lora --config ...` in this process: refused by Validate's checks before the run's heavy
    imports (tests/train/test_entry_refusals.py runs the entry in a fresh interpreter)."""
    from trainers.__main__ import main

    config = tmp_path / "config.toml"
    config_from_dict("lora", {**base, "model_family": "sdxl", "vae": str(tmp_path)}).save(config)
    monkeypatch.setattr("trainers.train.run._train", lambda *a, **k: pytest.fail("the run went on to load the model"))
    assert main(["lora", "--config", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "model_family" in out.err + out.out
    assert "vae" in out.err + out.out


def test_component_files_of_the_wrong_kind_are_named_with_what_they_hold(tmp_path: Path) -> None:
    from trainers.models.checks import model_issues

    flux = tmp_path / "flux.safetensors"
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(3, 1)}, flux)  # a transformer-only FLUX file
    clip = tmp_path / "clip_l.safetensors"
    save_file({"text_model.embeddings.token_embedding.weight": torch.zeros(4, 2),
               "text_model.encoder.layers.0.mlp.fc1.weight": torch.zeros(2, 2)}, clip)
    ae = tmp_path / "ae.safetensors"
    save_file(_ldm_ae(16), ae)
    text = tmp_path / "notes.safetensors"
    text.write_text("not tensors")
    issues = model_issues({"pretrained_model_name_or_path": str(flux), "clip_l": str(ae), "t5xxl": str(clip),
                           "ae": str(text)})
    said = {issue.field: issue.message for issue in issues}
    assert set(said) == {"clip_l", "t5xxl", "ae"}, said
    assert said["clip_l"].startswith(f"{ae} holds an autoencoder") and "not a CLIP text encoder" in said["clip_l"]
    assert said["t5xxl"].startswith(f"{clip} holds a CLIP text encoder") and "not a T5 encoder" in said["t5xxl"]
    assert said["ae"] == f"{text} is not a .safetensors file: give the autoencoder that FLUX.1 models read " \
                         "(encoder.conv_in..., encoder.down..., decoder.conv_in...)"
    right = model_issues({"pretrained_model_name_or_path": str(flux), "clip_l": str(clip), "t5xxl": str(clip),
                          "ae": str(ae)})
    assert [i.field for i in right] == ["t5xxl"]


def _ldm_ae(latent_channels: int) -> dict[str, torch.Tensor]:
    """The names (and the latent width) of an autoencoder in the original layout: FLUX.1's ae (16), SD's VAE (4)."""
    return {"encoder.conv_in.weight": torch.zeros(2, 3, 1, 1), "encoder.down.0.block.0.conv1.weight": torch.zeros(1),
            "decoder.conv_in.weight": torch.zeros(2, latent_channels, 1, 1)}


def test_an_ae_of_another_family_or_layout_is_named_before_loading(tmp_path: Path) -> None:
    from diffusers import AutoencoderKL, AutoencoderKLQwenImage

    from trainers.models.checks import model_issues

    flux = tmp_path / "flux.safetensors"
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(3, 1)}, flux)
    qwen = tmp_path / "qwen.safetensors"
    save_file({"txt_norm.weight": torch.zeros(2)}, qwen)
    files = {"sd_vae_ldm": _ldm_ae(4), "flux_ae": _ldm_ae(16),
             "sd_vae_diffusers": AutoencoderKL(block_out_channels=(4,), norm_num_groups=2).state_dict(),
             "qwen_vae": AutoencoderKLQwenImage(base_dim=4, z_dim=16, dim_mult=[1], num_res_blocks=1,
                                                temperal_downsample=[]).state_dict()}
    for name, state in files.items():
        save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / f"{name}.safetensors")

    def ae_issue(model: Path, name: str) -> str | None:
        said = {i.field: i.message for i in model_issues({"pretrained_model_name_or_path": str(model),
                                                           "ae": str(tmp_path / f"{name}.safetensors")})}
        return said.get("ae")

    assert ae_issue(flux, "flux_ae") is None and ae_issue(qwen, "qwen_vae") is None
    for model, name, words in ((flux, "sd_vae_diffusers", ["not the autoencoder that FLUX.1 models read",
                                                           "encoder.down..."]),
                               (flux, "qwen_vae", ["not the autoencoder that FLUX.1 models read"]),
                               (qwen, "flux_ae", ["Qwen-Image models read", "conv2..."]),
                               (qwen, "sd_vae_ldm", ["Qwen-Image models read"])):
        message = ae_issue(model, name) or ""
        assert message.startswith(str(tmp_path / f"{name}.safetensors")), (name, message)
        assert all(word in message for word in words), (name, message)
    from trainers.models.component_files import autoencoder
    from trainers.models.rules import ModelLoadError

    with pytest.raises(ModelLoadError, match="^ae: .*not an autoencoder in the original layout"):
        autoencoder(files["sd_vae_diffusers"], 1.0, 0.0)  # a pickle's, read only at load: no IndexError


@pytest.mark.parametrize(("family", "keys", "words"), [
    ("lumina2", ("x_embedder.weight", "noise_refiner.0.attention.to_q.weight", "time_caption_embed.0.weight"),
     ["none of the tensors of Lumina 2 single files (cap_embedder....)", "(model_family = 'lumina2')",
      "its transformer, in diffusers' names"]),
    ("krea2", ("img_in.weight", "transformer_blocks.0.attn.to_q.weight"),
     ["none of the tensors of Krea 2 single files (txtfusion....)", "its transformer, in diffusers' names"]),
    ("flux_kontext", ("x_embedder.weight", "single_transformer_blocks.0.attn.to_q.weight"),
     ["none of the tensors of FLUX.1 Kontext single files", "its transformer, in diffusers' names"]),
    ("flux_kontext", ("double_blocks.0.img_attn.qkv.weight",),  # FLUX.1 dev's reference keys, which Kontext shares
     ["is 'flux_kontext'", "layout of FLUX.1 models", "FLUX.1 Kontext diffusers folder (FluxKontextPipeline)"]),
    ("sdxl", ("cap_pad_token", "cap_embedder.0.weight", "x_embedder.weight"),
     ["is 'sdxl'", "holds a model of the Z-Image family"]),
])
def test_a_file_not_of_the_family_model_family_names_is_told_in_that_familys_words(
        family: str, keys: tuple[str, ...], words: list[str], tmp_path: Path) -> None:
    from trainers.models.checks import model_issues

    path = tmp_path / f"{family}.safetensors"
    save_file({key: torch.zeros(2) for key in keys}, path)
    issues = [i for i in model_issues({"pretrained_model_name_or_path": str(path), "model_family": family})
              if i.field in ("pretrained_model_name_or_path", "model_family")]
    assert len(issues) == 1, issues
    message = issues[0].message
    assert all(word in message for word in words), message
    assert "Stable Diffusion" not in message and not re.search(r"\ban [FKLQZ]", message), message


def test_no_message_puts_an_before_a_family_title() -> None:
    """'an Z-Image model': family titles are read in many ways (S-D-X-L, Flux, Zed), so messages name them without
    an article before them."""
    found = [f"{path.relative_to(REPO)}:{n}" for folder in ("trainers", "gui") for path in (REPO / folder).rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\ban \{[\w.]*title\}", line)]
    assert not found, found


def test_model_checks_load_no_torch(base: dict) -> None:
    code = ("import sys; from trainers.models.checks import model_issues; "
            f"model_issues({{**{base!r}, 'vae': {base['train_data_dir']!r}, 'clip_skip': 3}}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'diffusers', 'transformers')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr[-2000:]
