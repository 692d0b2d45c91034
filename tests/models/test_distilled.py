"""Distilled ("turbo") bases (docs/distilled.md): each family tells its distilled variant from its files; Validate
says which handling was chosen, names the adapter to download, and refuses a bad training_adapter by name; the
adapter changes the prediction while training, not the samples, and no save holds it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from helpers import events, train
from PIL import Image
from safetensors.torch import save_file

from trainers.core.errors import ConfigError
from trainers.core.options import BY_NAME, config_from_dict
from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.models import load_model
from trainers.models.distilled import adapter_issues, distilled_base, distilled_notes
from trainers.models.flux.tiny import build_tiny_flux
from trainers.models.flux2.tiny import build_tiny_flux2_klein
from trainers.models.krea2.tiny import build_tiny_krea2
from trainers.models.training_adapter import adapter_hooks, attach_training_adapter, training_adapter_off
from trainers.models.zimage.tiny import build_tiny_zimage
from trainers.preflight.report import preflight

MODEL = "pretrained_model_name_or_path"
# (builder of the distilled variant, of the undistilled one, the distilled variant's name, what Validate names)
VARIANTS: dict[str, tuple[Callable[[Path], Path], Callable[[Path], Path], str, str]] = {
    "flux": (lambda p: build_tiny_flux(p, guidance_embeds=False), build_tiny_flux, "FLUX.1 schnell",
             "ostris/FLUX.1-schnell-training-adapter"),
    "flux2": (lambda p: build_tiny_flux2_klein(p, distilled=True), build_tiny_flux2_klein, "FLUX.2 klein (distilled)",
              "FLUX.2-klein-base"),
    "zimage": (build_tiny_zimage, lambda p: build_tiny_zimage(p, turbo=False), "Z-Image Turbo",
               "ostris/zimage_turbo_training_adapter"),
    "krea2": (lambda p: build_tiny_krea2(p, distilled=True), build_tiny_krea2, "Krea 2 Turbo",
              "ostris/krea2_turbo_training_adapter"),
}


@pytest.fixture(scope="module")
def zimage(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny Z-Image Turbo and base, a dataset, and an adapter of Turbo's attention in diffusers' names (as ostris'
    zimage_turbo_training_adapter names them)."""
    tmp = tmp_path_factory.mktemp("zimage")
    turbo, base = build_tiny_zimage(tmp / "turbo"), build_tiny_zimage(tmp / "base", turbo=False)
    generator = torch.Generator().manual_seed(1)
    adapter = {}
    for layer in range(2):
        for part in ("to_q", "to_k", "to_v", "to_out.0"):
            name = f"diffusion_model.layers.{layer}.attention.{part}"
            adapter[f"{name}.lora_A.weight"] = torch.randn(2, 32, generator=generator) * 0.3
            adapter[f"{name}.lora_B.weight"] = torch.randn(32, 2, generator=generator) * 0.3
    save_file(adapter, tmp / "adapter.safetensors")
    save_file({"weight": torch.zeros(2)}, tmp / "not_a_lora.safetensors")
    return {"turbo": turbo, "base": base, "adapter": tmp / "adapter.safetensors",
            "not_a_lora": tmp / "not_a_lora.safetensors", "data": build_dataset(tmp / "data", folder="2_sks shape"),
            "tmp": tmp}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_family_tells_its_distilled_variant_from_its_files(name: str, tmp_path: Path) -> None:
    distilled, undistilled, variant, named = VARIANTS[name]
    found = distilled_base({MODEL: str(distilled(tmp_path / "distilled"))})
    assert found is not None and found.variant == variant
    assert distilled_base({MODEL: str(undistilled(tmp_path / "undistilled"))}) is None
    (note,) = distilled_notes({MODEL: str(tmp_path / "distilled")})
    assert variant in note and named in note and "speed" in note  # the warning names what to download or train


def test_a_flux_single_file_without_a_guidance_embedding_is_schnell(tmp_path: Path) -> None:
    blocks = {"double_blocks.0.img_attn.qkv.weight": torch.zeros(2, 2), "img_in.weight": torch.zeros(2, 64),
              "single_blocks.0.linear1.weight": torch.zeros(2, 2)}
    save_file(blocks, tmp_path / "flux1-schnell.safetensors")
    save_file({**blocks, "guidance_in.in_layer.weight": torch.zeros(2, 2)}, tmp_path / "flux1-dev.safetensors")
    found = distilled_base({MODEL: str(tmp_path / "flux1-schnell.safetensors")})
    assert found is not None and found.variant == "FLUX.1 schnell" and "guidance_in" in found.told_by
    assert distilled_base({MODEL: str(tmp_path / "flux1-dev.safetensors")}) is None
    dev_with_adapter = {MODEL: str(tmp_path / "flux1-dev.safetensors"), "training_adapter": str(tmp_path / "a.st")}
    save_file({"transformer.x.lora_A.weight": torch.zeros(1, 2), "transformer.x.lora_B.weight": torch.zeros(2, 1)},
              tmp_path / "a.st")
    (issue,) = adapter_issues(dev_with_adapter)  # a single file tells dev from schnell
    assert issue.field == "training_adapter" and "not distilled" in issue.message


def test_a_zimage_single_file_does_not_tell_turbo_and_takes_an_adapter(tmp_path: Path) -> None:
    from trainers.models.checks import local_family

    save_file({"cap_pad_token": torch.zeros(1, 32), "x_embedder.weight": torch.zeros(32, 16)},
              tmp_path / "z_image_turbo_bf16.safetensors")
    assert local_family(str(tmp_path / "z_image_turbo_bf16.safetensors")) == "zimage"
    save_file({"transformer.x.lora_A.weight": torch.zeros(1, 2), "transformer.x.lora_B.weight": torch.zeros(2, 1)},
              tmp_path / "a.st")
    values = {MODEL: str(tmp_path / "z_image_turbo_bf16.safetensors"), "training_adapter": str(tmp_path / "a.st")}
    assert distilled_base(values) is None and adapter_issues(values) == []


def _config(zimage: dict[str, Path], model: str = "turbo", **values: Any) -> Any:
    return config_from_dict("lora", {MODEL: str(zimage[model]), "train_data_dir": str(zimage["data"]),
                                     "output_dir": str(zimage["tmp"] / "out"), "resolution": "64", "max_train_steps": 2,
                                     **values})


def test_validate_says_which_handling_was_chosen(zimage: dict[str, Path]) -> None:
    without = preflight(_config(zimage))
    assert without.ok and any("ostris/zimage_turbo_training_adapter" in w for w in without.warnings)
    adapter = preflight(_config(zimage, training_adapter=str(zimage["adapter"])))
    assert adapter.ok, adapter.errors
    (line,) = [w for w in adapter.warnings if "Z-Image Turbo" in w]
    assert "adapter.safetensors x 1" in line and "left out of the saves and the samples" in line
    assert not any("Z-Image" in w for w in preflight(_config(zimage, "base")).warnings)


@pytest.mark.parametrize("case", ["missing", "not_a_lora", "undistilled base", "another family"])
def test_a_bad_training_adapter_is_refused_by_name(zimage: dict[str, Path], case: str) -> None:
    values = {"missing": {"training_adapter": str(zimage["tmp"] / "nowhere.safetensors")},
              "not_a_lora": {"training_adapter": str(zimage["not_a_lora"])},
              "undistilled base": {"training_adapter": str(zimage["adapter"]), MODEL: str(zimage["base"])},
              "another family": {"training_adapter": str(zimage["adapter"]), "pretrained_model_name_or_path":
                                 str(zimage["tmp"] / "sd")}}[case]
    if case == "another family":
        from trainers.models.sd.tiny import build_tiny_sd1

        build_tiny_sd1(zimage["tmp"] / "sd")
    report = preflight(_config(zimage, **values))
    assert not report.ok
    assert any(issue.field == "training_adapter" for issue in report.errors), report.errors


def test_the_adapter_lies_under_the_allowed_roots_like_every_path_option(zimage: dict[str, Path]) -> None:
    from gui.allowed_paths import outside_roots

    cfg = _config(zimage, training_adapter=str(zimage["adapter"]))
    assert not outside_roots(cfg, [zimage["tmp"]])
    (issue,) = outside_roots(cfg.replace(training_adapter="/etc/adapter.safetensors"), [zimage["tmp"]])
    assert issue.field == "training_adapter"


def _prediction(model: Any) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(1, 4, 8, 8, generator=generator)
    hidden, mask = torch.randn(1, 6, 32, generator=generator), torch.ones(1, 6)
    with torch.no_grad():
        return model.family.denoise(model.unet, latents, torch.tensor([500.0]), hidden, mask, None)


def test_the_adapter_changes_the_prediction_and_nothing_that_is_saved(zimage: dict[str, Path]) -> None:
    model = load_model(str(zimage["turbo"]), "auto", torch.float32)
    keys, before = set(model.unet.state_dict()), _prediction(model)
    assert attach_training_adapter(model, zimage["adapter"], 1.0) == 8
    adapted = _prediction(model)
    assert (adapted - before).abs().max() > 1e-3  # what training sees
    with training_adapter_off(model.unet):
        assert torch.equal(_prediction(model), before)  # exactly the base: what samples see
    assert torch.equal(_prediction(model), adapted) and len(adapter_hooks(model.unet)) == 8
    assert set(model.unet.state_dict()) == keys  # a finetune's save holds none of it


def test_flux_schnell_takes_its_adapter_in_the_names_ostris_publishes(tmp_path: Path) -> None:
    model = load_model(str(build_tiny_flux(tmp_path / "schnell", guidance_embeds=False)), "auto", torch.float32)
    generator, adapter = torch.Generator().manual_seed(2), {}
    for name in ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.attn.to_k",
                 "single_transformer_blocks.0.proj_out"):
        layer = model.unet.get_submodule(name)
        adapter[f"transformer.{name}.lora_A.weight"] = torch.randn(2, layer.in_features, generator=generator)
        adapter[f"transformer.{name}.lora_B.weight"] = torch.randn(layer.out_features, 2, generator=generator)
    save_file(adapter, tmp_path / "pytorch_lora_weights.safetensors")
    latents, hidden = torch.randn(1, 4, 4, 4, generator=generator), torch.randn(1, 4, 32, generator=generator)
    pooled = torch.randn(1, 32, generator=generator)

    def predict() -> torch.Tensor:
        with torch.no_grad():
            return model.family.denoise(model.unet, latents, torch.tensor([700.0]), hidden, pooled, None)

    before = predict()
    assert attach_training_adapter(model, tmp_path / "pytorch_lora_weights.safetensors", 0.5) == 3
    assert (predict() - before).abs().max() > 1e-3
    with training_adapter_off(model.unet):
        assert torch.equal(predict(), before)


def test_an_adapter_of_another_model_is_refused_by_name(zimage: dict[str, Path]) -> None:
    model = load_model(str(zimage["turbo"]), "auto", torch.float32)
    wrong = zimage["tmp"] / "wrong.safetensors"
    save_file({"transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight": torch.zeros(2, 32),
               "transformer.single_transformer_blocks.0.attn.to_q.lora_B.weight": torch.zeros(32, 2)}, wrong)
    with pytest.raises(ConfigError) as err:
        attach_training_adapter(model, wrong, 1.0)
    (issue,) = err.value.issues
    assert issue.field == "training_adapter" and "single_transformer_blocks.0.attn.to_q" in issue.message
    dora = zimage["tmp"] / "dora.safetensors"
    save_file({"layers.0.attention.to_q.lora_A.weight": torch.zeros(2, 32),
               "layers.0.attention.to_q.lora_B.weight": torch.zeros(32, 2),
               "layers.0.attention.to_q.lora_magnitude_vector": torch.ones(32)}, dora)
    with pytest.raises(ConfigError) as err:
        attach_training_adapter(model, dora, 1.0)
    assert err.value.issues[0].field == "training_adapter" and "DoRA" in err.value.issues[0].message
    assert not adapter_hooks(model.unet)  # nothing was hooked by a refused file


def test_samples_are_rendered_without_the_adapter(zimage: dict[str, Path]) -> None:
    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    prompts = config_prompts("", ["sks shape --w 64 --h 64 --s 2 --d 3"])
    images = []
    for name, adapter in (("plain", False), ("adapted", True)):
        model = load_model(str(zimage["turbo"]), "auto", torch.float32)
        if adapter:
            attach_training_adapter(model, zimage["adapter"], 1.0)
        (path,) = generate_samples(model, prompts, zimage["tmp"] / name, "s", sampler="euler", default_size=(64, 64),
                                   default_steps=2, default_cfg=0.0)
        images.append(list(Image.open(path).getdata()))
        assert all(hook.enabled for hook in adapter_hooks(model.unet))  # on again once the samples are made
    assert images[0] == images[1]


@pytest.mark.slow  # two training runs
def test_a_lora_trained_with_the_adapter_saves_no_adapter_keys(zimage: dict[str, Path]) -> None:
    tmp = zimage["tmp"]
    common = {MODEL: str(zimage["turbo"]), "train_data_dir": str(zimage["data"]), "output_dir": str(tmp / "runs"),
              "resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
              "network_dim": 4, "network_alpha": 2, "save_precision": "float", "max_train_steps": 2,
              "timestep_sampling": "shift", "discrete_flow_shift": 2.0, "weighting_scheme": "none"}
    assert train("lora", tmp / "plain", **common, output_name="plain") == 0
    assert train("lora", tmp / "adapted", **common, output_name="adapted",
                 training_adapter=str(zimage["adapter"])) == 0
    plain, _ = read_lora_file(tmp / "runs" / "plain.safetensors")
    adapted, _ = read_lora_file(tmp / "runs" / "adapted.safetensors")
    assert set(adapted) == set(plain)  # the same modules as without the adapter: none of the adapter's
    assert not any("lora_A" in key or "diffusion_model" in key for key in adapted)
    losses = [[e["loss"] for e in events(tmp / run) if e["type"] == "progress"] for run in ("plain", "adapted")]
    assert losses[0] != losses[1]  # trained on the adapted base
    warned = [e["message"] for e in events(tmp / "plain") if e["type"] == "warning"]
    assert any("ostris/zimage_turbo_training_adapter" in message for message in warned)
    assert not any("Z-Image Turbo" in e.get("message", "") for e in events(tmp / "adapted"))

    # an adapter in the family's kohya names (the LoRA just trained) adapts as the LoRA network applies that file
    from trainers.methods.lora.network import LoRANetwork

    hooked, networked = (load_model(str(zimage["turbo"]), "auto", torch.float32) for _ in range(2))
    assert attach_training_adapter(hooked, tmp / "runs" / "plain.safetensors", 1.0) > 0
    network = LoRANetwork(networked.unet, [], unet_key_style="own", network_dim=1, network_alpha=1,
                          train_text_encoder=False, modules_dim=LoRANetwork.modules_dim_from_state_dict(plain),
                          unet_targets=networked.family.lora_targets(networked.unet))
    network.load_kohya_state_dict(plain)
    network.apply_to()
    assert torch.allclose(_prediction(hooked), _prediction(networked), atol=1e-5)
