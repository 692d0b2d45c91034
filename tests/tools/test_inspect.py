"""tools inspect: a LoRA's family, format, network type, ranks per block, metadata, hashes and trigger words, which
loaders take it and the keys each leaves out; a LoRA against a model of another family; a model folder."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from lora_samples import LINEAR, OUT, TEXT, module, run, sample_modules, tiny_lora, write

from trainers.methods.lora.file_format import read_lora_file, save_lora_file


def _report(folder: Path) -> tuple[dict, str]:
    return json.loads((folder / "report.json").read_text()), (folder / "report.md").read_text()


def test_a_trained_lora_is_described_whole(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    lora = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors")
    tensors, metadata = read_lora_file(lora)
    metadata.update({"ss_dataset_dirs": json.dumps({"10_sks dog": {"n_repeats": 10, "img_count": 3}}),
                     "ss_tag_frequency": json.dumps({"10_sks dog": {"dog": 3, "grass": 1, "a|b": 1}}),
                     "ss_training_comment": "made <b>here</b> | by me"})
    tensors[f"{LINEAR}.lora_up.weight"] *= 2  # edited after it was saved: its stored hash no longer matches
    save_lora_file(lora, tensors, metadata)
    run("inspect", tmp_path / "job", file=str(lora))
    data, markdown = _report(tmp_path / "job")
    assert data["family"] == "SD1.x (its metadata: ss_base_model_version = sd_v1)"
    assert data["key_format"] == "kohya" and data["network_types"] == {"LoRA": 103, "LoCon": 26}  # 3x3: LoCon
    blocks = {b["block"]: b for b in data["blocks"]}
    assert blocks["text encoder 1"] == {"block": "text encoder 1", "modules": 12, "ranks": "4", "alphas": "2",
                                        "types": "LoRA"}
    assert blocks["IN03"]["types"] == "LoCon" and blocks["IN03"]["ranks"] == "2"  # the downsampler
    assert data["trigger_words"] == ["sks dog"] and data["top_tags"][0] == ["dog", 3]
    stored = data["hashes"]["sshs_model_hash"]
    assert stored["stored"] and stored["computed"] != stored["stored"]
    assert "changed since" in markdown
    assert [(v["loader"], v["status"]) for v in data["loaders"]] == [
        ("ComfyUI", "yes"), ("A1111", "yes"), ("Forge", "yes"), ("diffusers", "yes"), ("sd-scripts", "yes")]
    assert r"made \<b\>here\</b\> \| by me" in markdown and r"a\|b (1)" in markdown  # file text stays text


def test_loaders_that_leave_keys_out_are_named_with_the_keys(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    modules = sample_modules()
    tensors = {k: v for name, m in modules.items() if name != TEXT for k, v in m.tensors(name).items()}
    tensors[f"{LINEAR}.dora_scale"] = torch.ones(1, 32)
    loha = {"hada_w1_a": (32, 2), "hada_w1_b": (2, 32), "hada_w2_a": (32, 2), "hada_w2_b": (2, 32)}
    tensors.update({f"{TEXT}.{k}": torch.randn(shape, generator=generator) for k, shape in loha.items()})
    tensors[f"{TEXT}.alpha"] = torch.tensor(2.0)
    save_lora_file(tmp_path / "mixed.safetensors", tensors, {})
    run("inspect", tmp_path / "job", file=str(tmp_path / "mixed.safetensors"))
    data, _ = _report(tmp_path / "job")
    assert data["network_types"] == {"DoRA (LoRA)": 1, "LoCon": 1, "LoRA": 1, "LoHa": 1}
    verdicts = {v["loader"]: v for v in data["loaders"]}
    assert verdicts["ComfyUI"]["status"] == "yes" and verdicts["A1111"]["status"] == "yes"
    assert verdicts["diffusers"]["status"] == "partly"
    assert f"{LINEAR}.dora_scale" in verdicts["diffusers"]["examples"]
    assert f"{TEXT}.hada_w1_a" in verdicts["diffusers"]["examples"] and verdicts["diffusers"]["ignored"] == 6
    assert data["family"] == "SD2.x or SD1.x (its key names)"  # no metadata, and the width tells neither


def test_a_kohya_file_whose_alphas_differ_is_flagged_for_diffusers(tmp_path: Path) -> None:
    modules = sample_modules()  # alpha 2, and 1 for the 3x3 conv: diffusers reads that right
    write(tmp_path / "locon.safetensors", modules)
    modules["lora_unet_up_blocks_1_attentions_0_proj_out"] = modules.pop(OUT)  # two UNet modules at alpha 2
    modules[OUT] = module(64, (64, 1, 1), 4, 2.0, 5)
    modules[LINEAR].alpha = 3.0  # an attention layer's own alpha: diffusers gives it the UNet's most common, 2
    modules[TEXT].alpha = 3.0  # the text encoder's only alpha: its part's most common, which diffusers reads right
    write(tmp_path / "varied.safetensors", modules)
    for name in ("locon", "varied"):
        run("inspect", tmp_path / name, file=str(tmp_path / f"{name}.safetensors"))
    status = {name: next(v for v in _report(tmp_path / name)[0]["loaders"] if v["loader"] == "diffusers")
              for name in ("locon", "varied")}
    assert status["locon"]["status"] == "yes"
    assert status["varied"]["status"] == "partly" and status["varied"]["note"].startswith(
        "its modules' alphas differ, and diffusers gives its attention and text-encoder layers the most common one")
    assert ": 1 load at the wrong strength" in status["varied"]["note"]


def test_a_lora_against_a_model_of_another_family(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    names = {"lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q": sample_modules()[LINEAR]}
    lora = write(tmp_path / "xl.safetensors", names, {"ss_base_model_version": "sdxl_base_v1-0"})
    run("inspect", tmp_path / "job", file=str(lora), model=str(tiny_sd1_dir))
    data, markdown = _report(tmp_path / "job")
    check = data["model_check"]
    assert check["unknown_modules"] == list(names) and check["family"] == "SD1.x"
    assert check["family_mismatch"] == "the LoRA is for SDXL, the model is SD1.x"
    assert "1 modules name none of its layers" in markdown


def test_a_model_folder_is_described(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    run("inspect", tmp_path / "job", file=str(tiny_sd1_dir))
    data, markdown = _report(tmp_path / "job")
    assert data["family"] == "SD1.x" and data["parts"]["unet"]["class"] == "UNet2DConditionModel"
    assert data["parts"]["text_encoder"]["dtypes"] == {"F32": 36} or "F32" in data["parts"]["text_encoder"]["dtypes"]
    assert "| unet | UNet2DConditionModel | F32 |" in markdown


def _dynamically_resized(lora: Path, out: Path, fro: float) -> Path:
    """The LoRA as sd-scripts' resize_lora.py --dynamic_method sv_fro writes it: each module at the rank its singular
    values give, its alpha that rank x the module's alpha / rank (so the alphas differ by module)."""
    tensors, metadata = read_lora_file(lora)
    resized = {}
    for name in sorted({key.split(".")[0] for key in tensors}):
        down, up = tensors[f"{name}.lora_down.weight"], tensors[f"{name}.lora_up.weight"]
        scale = float(tensors[f"{name}.alpha"]) / down.shape[0]
        u, s, vh = torch.linalg.svd(up.flatten(1) @ down.flatten(1), full_matrices=False)
        kept = torch.cumsum(s ** 2, 0) / (s ** 2).sum()
        rank = int((kept < fro ** 2).sum()) + 1
        resized[f"{name}.lora_down.weight"] = vh[:rank].reshape(rank, *down.shape[1:]).contiguous()
        resized[f"{name}.lora_up.weight"] = (u[:, :rank] * s[:rank]).reshape(up.shape[0], rank,
                                                                               *up.shape[2:]).contiguous()
        resized[f"{name}.alpha"] = torch.tensor(scale * rank)
    save_lora_file(out, resized, {**metadata, "ss_network_dim": "Dynamic", "ss_network_alpha": "Dynamic"})
    return out


def _misapplied_by_diffusers(model_dir: Path, lora: Path) -> int:
    """How many modules diffusers' own load_lora_weights scales by another alpha / rank than the file's."""
    from diffusers import StableDiffusionPipeline
    from peft.tuners.lora import LoraLayer

    from trainers.loras.lycoris_files import kohya_modules
    from trainers.models import LoadedModel
    from trainers.models.loading import detect_family

    tensors, _ = read_lora_file(lora)
    pipe = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None)
    pipe.load_lora_weights(str(lora.parent), weight_name=lora.name)
    model = LoadedModel(detect_family(model_dir), pipe.unet, pipe.vae, [pipe.text_encoder], [], None, "", "")
    names = {id(layer): name for name, layer in kohya_modules(model).items() if f"{name}.alpha" in tensors}
    wrong = 0
    for part in (pipe.unet, pipe.text_encoder):
        for layer in part.modules():
            if isinstance(layer, LoraLayer):
                name = names[id(layer.base_layer)]
                wanted = float(tensors[f"{name}.alpha"]) / tensors[f"{name}.lora_down.weight"].shape[0]
                wrong += abs(next(iter(layer.scaling.values())) - wanted) > 1e-6
    return wrong


def test_inspect_counts_exactly_the_modules_diffusers_misapplies_in_a_dynamic_resize(tiny_sd1_dir: Path,
                                                                                       tmp_path: Path) -> None:
    """The text encoder's changes have fewer strong directions than the UNet's (as when it trains at a lower
    learning rate), so its modules keep lower ranks: its most common alpha is not the file's, and diffusers, which
    reads each part's alphas apart, gives every text-encoder module that one."""
    tensors, metadata = read_lora_file(tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors", seed=3))
    for key in [k for k in tensors if k.startswith("lora_te_") and k.endswith("lora_up.weight")]:
        tensors[key] = tensors[key] * torch.tensor([1.0, 0.1, 0.1, 0.1])
    save_lora_file(tmp_path / "trained.safetensors", tensors, metadata)
    lora = _dynamically_resized(tmp_path / "trained.safetensors", tmp_path / "dynamic.safetensors", fro=0.8)
    truth = _misapplied_by_diffusers(tiny_sd1_dir, lora)
    run("inspect", tmp_path / "job", file=str(lora))
    diffusers = next(v for v in _report(tmp_path / "job")[0]["loaders"] if v["loader"] == "diffusers")
    assert truth > 0 and diffusers["status"] == "partly"
    assert f": {truth} load at the wrong strength" in diffusers["note"], (truth, diffusers["note"])
