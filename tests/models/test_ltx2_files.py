"""LTX-2 from its single files, on the tiny model of the real diffusers classes written in the published layouts:
Lightricks' ltx-2-19b-dev.safetensors (the transformer and its connectors under `model.diffusion_model.`, the
projection, `vae.`, `audio_vae.`, `vocoder.`, its `config` metadata) as diffusers' own single-file converters read it,
and ComfyUI's Gemma 3 file (`model.layers...`). The files load as the folder does (every weight, the captions'
states, the transformer's output); Validate takes them and names what is missing; quantized, distilled, later-version
and incomplete files and a text encoder that is not Gemma 3 are refused by name; a 2-step LoRA run from the files
(slow) trains what the folder's run trains."""
from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_ltx2 import CAPTIONS, _values, video_dataset

from trainers.models import load_model
from trainers.models.base import ModelFiles
from trainers.models.checks import model_issues
from trainers.models.ltx2.rules import LTX2
from trainers.models.ltx2.tiny import build_tiny_ltx2
from trainers.models.ltx2.tiny_files import write_tiny_files
from trainers.models.rules import checkpoint_rules


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx2") / "model")


@pytest.fixture(scope="module")
def files(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_tiny_files(tiny, tmp_path_factory.mktemp("ltx2-files"))


@pytest.fixture(scope="module")
def loaded(tiny: Path, files: dict[str, Path]) -> SimpleNamespace:
    options = ModelFiles(text_encoder=str(files["text_encoder"]), tokenizer_cache_dir=str(files["tokenizer_cache_dir"]))
    return SimpleNamespace(folder=load_model(str(tiny), "auto", torch.float32),
                           file=load_model(str(files["pretrained_model_name_or_path"]), "auto", torch.float32,
                                           files=options))


def _options(files: dict[str, Path], **more: object) -> dict[str, object]:
    return {name: str(path) for name, path in files.items() if name != "pretrained_model_name_or_path"} | more


def _file(path: Path, names: list[str]) -> Path:
    """A file holding `names` (one-element tensors): what the checks before loading read."""
    save_file({name: torch.zeros(1) for name in names}, str(path))
    return path


def test_the_model_file_is_what_diffusers_single_file_converters_read(tiny: Path, files: dict[str, Path]) -> None:
    """diffusers' own converters (from_single_file's) turn the file's parts into the folder's weights, every key."""
    from diffusers import LTX2Pipeline
    from diffusers.loaders.single_file_utils import (convert_ltx2_audio_vae_to_diffusers,
                                                     convert_ltx2_transformer_to_diffusers,
                                                     convert_ltx2_vae_to_diffusers)

    pipe = LTX2Pipeline.from_pretrained(tiny)
    state = load_file(str(files["pretrained_model_name_or_path"]))
    assert sum(k.startswith("model.diffusion_model.audio_adaln_single.") for k in state) > 0
    for prefix, convert, module in (("model.diffusion_model.", convert_ltx2_transformer_to_diffusers, pipe.transformer),
                                    ("vae.", convert_ltx2_vae_to_diffusers, pipe.vae),
                                    ("audio_vae.", convert_ltx2_audio_vae_to_diffusers, pipe.audio_vae)):
        theirs = convert({k: v for k, v in state.items() if k.startswith(prefix)})
        ours = module.state_dict()
        assert theirs.keys() == ours.keys(), prefix
        assert all(torch.equal(theirs[k], ours[k]) for k in ours), prefix
    assert "text_embedding_projection.aggregate_embed.weight" in state
    gemma = load_file(str(files["text_encoder"]))
    assert "model.layers.0.self_attn.q_norm.weight" in gemma and "model.embed_tokens.weight" in gemma


def test_the_files_load_as_the_folder_does(loaded: SimpleNamespace) -> None:
    """Every weight and config of the transformer, the autoencoders, the connectors, the vocoder and Gemma 3's
    language model; the captions' states and the transformer's output the same."""
    folder, file = loaded.folder, loaded.file
    assert file.family.name == "ltx2" and type(file.text_encoders[0]).__name__ == "Gemma3TextModel"
    pairs = ((folder.unet, file.unet), (folder.vae, file.vae), (folder.text_encoders[1], file.text_encoders[1]),
             (folder.family.parts.vocoder, file.family.parts.vocoder),
             (folder.family.parts.audio_vae, file.family.parts.audio_vae),
             (folder.text_encoders[0].model.language_model, file.text_encoders[0]))
    for ours, theirs in pairs:
        mine, other = ours.state_dict(), theirs.state_dict()
        assert mine.keys() == other.keys() and all(torch.equal(mine[k], other[k]) for k in mine), type(ours)
    for ours, theirs in pairs[:4]:
        assert {k: v for k, v in ours.config.items() if not k.startswith("_")} == \
            {k: v for k, v in theirs.config.items() if not k.startswith("_")}, type(ours)
    assert file.tokenizers[0].padding_side == "left"
    with torch.no_grad():
        hidden, mask = folder.encode_texts(CAPTIONS, 1)
        file_hidden, file_mask = file.encode_texts(CAPTIONS, 1)
        assert torch.equal(mask, file_mask) and torch.allclose(hidden, file_hidden, atol=1e-6)
        noisy, timesteps = torch.randn(2, 8, 2, 2, 3), torch.tensor([900.0, 100.0])
        assert torch.equal(folder.family.denoise(folder.unet, noisy, timesteps, hidden, mask, None),
                           file.family.denoise(file.unet, noisy, timesteps, hidden, mask, None))


def test_validate_takes_the_files_and_names_a_missing_text_encoder(files: dict[str, Path]) -> None:
    model = files["pretrained_model_name_or_path"]
    assert checkpoint_rules(load_file(str(model)), str(model)) is LTX2
    assert model_issues(_values(model, **_options(files))) == []
    (issue,) = model_issues(_values(model, tokenizer_cache_dir=str(files["tokenizer_cache_dir"])))
    assert issue.field == "text_encoder" and "gemma_3_12B_it.safetensors" in issue.message, issue.message


def test_quantized_distilled_later_and_incomplete_files_are_refused_by_name(files: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    names = list(load_file(str(files["pretrained_model_name_or_path"])))
    marker = "model.diffusion_model.transformer_blocks.0.attn1.to_q.weight"
    distilled = tmp_path / "ltx-2-19b-distilled.safetensors"
    shutil.copy(files["pretrained_model_name_or_path"], distilled)
    cases = {"fp8": (_file(tmp_path / "ltx-2-19b-dev-fp8.safetensors", names + [marker + "_scale"]), "quantized"),
             "distilled": (distilled, "distilled"),
             "2.3": (_file(tmp_path / "ltx-2.3-22b-dev.safetensors",
                           names + ["model.diffusion_model.prompt_adaln_single.linear.weight"]), "LTX-2.3 or later"),
             "transformer only": (_file(tmp_path / "transformer.safetensors",
                                        [n for n in names if n.startswith("model.diffusion_model.")
                                         and "embeddings_connector" not in n]),
                                  "no text connectors (video_embeddings_connector.) and no text projection")}
    for case, (path, said) in cases.items():
        (issue,) = model_issues(_values(path, **_options(files)))
        assert issue.field == "pretrained_model_name_or_path", case
        assert said in issue.message and "ltx-2-19b-dev.safetensors" in issue.message, issue.message


def test_a_text_encoder_that_is_not_gemma3_is_refused_by_name(files: dict[str, Path], tmp_path: Path) -> None:
    gemma = list(load_file(str(files["text_encoder"])))
    cases = {"Gemma 2": ([n for n in gemma if "q_norm" not in n], "not Gemma 3"),
             "scaled fp8": (gemma + ["model.layers.0.mlp.down_proj.weight_scale"], "quantized with scales")}
    for case, (names, said) in cases.items():
        path = _file(tmp_path / f"{case}.safetensors", names)
        (issue,) = model_issues(_values(files["pretrained_model_name_or_path"], **_options(files,
                                                                                         text_encoder=path)))
        assert issue.field == "text_encoder" and said in issue.message, issue.message


@pytest.mark.slow
def test_a_lora_run_from_the_files_trains_what_the_folders_run_does(tiny: Path, files: dict[str, Path],
                                                                   tmp_path: Path) -> None:
    """Two steps from clips and an image with a sample, from the single files and from the folder: the same LoRA."""
    from helpers import events, train

    from trainers.methods.lora.file_format import read_lora_file

    dataset = video_dataset(tmp_path / "data")
    common = {"dataset_config": str(dataset), "output_dir": str(tmp_path / "out"), "max_data_loader_n_workers": 0,
              "learning_rate": 1e-2, "network_dim": 4, "network_alpha": 2, "save_precision": "float",
              "timestep_sampling": "shift", "discrete_flow_shift": 4.7, "max_train_steps": 2}
    assert train("lora", tmp_path / "files", **common, **_options(files), output_name="files",
                 pretrained_model_name_or_path=str(files["pretrained_model_name_or_path"]),
                 sample_prompt_lines=["a clip --w 64 --h 64 --s 2"], sample_every_n_steps=2) == 0
    assert train("lora", tmp_path / "folder", **common, output_name="folder",
                 pretrained_model_name_or_path=str(tiny)) == 0
    evs = events(tmp_path / "files")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert Path(next(e for e in evs if e["type"] == "sample")["path"]).suffix == ".mp4"
    ours, metadata = read_lora_file(tmp_path / "out" / "files.safetensors")
    theirs, _ = read_lora_file(tmp_path / "out" / "folder.safetensors")
    assert ours.keys() == theirs.keys() and "lora_unet_transformer_blocks_0_attn1_to_q.lora_up.weight" in ours
    assert all(torch.allclose(ours[k], theirs[k], atol=1e-5) for k in ours)
    assert metadata["ss_base_model_version"] == "ltx2"


@pytest.mark.slow
def test_a_finetune_from_the_files_saves_a_folder_ltx2pipeline_loads(tiny: Path, files: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    """Its saved folder keeps the file's connectors, audio autoencoder and vocoder as the file holds them, so that
    LTX2Pipeline.from_pretrained loads it whole; the folder is claimed again."""
    from diffusers import LTX2Pipeline
    from helpers import train

    from trainers.models.rules import folder_rules

    assert train("finetune", tmp_path / "run", **_options(files), dataset_config=str(video_dataset(tmp_path / "data")),
                 pretrained_model_name_or_path=str(files["pretrained_model_name_or_path"]),
                 output_dir=str(tmp_path / "out"), max_data_loader_n_workers=0, learning_rate=1e-3,
                 save_precision="float", timestep_sampling="shift", discrete_flow_shift=4.7, max_train_steps=2,
                 output_name="ft") == 0
    folder = tmp_path / "out" / "ft"
    assert folder_rules(folder).name == "ltx2"
    saved, original = LTX2Pipeline.from_pretrained(folder), LTX2Pipeline.from_pretrained(tiny)
    for name in ("connectors", "audio_vae", "vocoder"):
        ours, theirs = getattr(saved, name).state_dict(), getattr(original, name).state_dict()
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours), name
    assert any(not torch.equal(v, saved.transformer.state_dict()[k])
               for k, v in original.transformer.state_dict().items())
