"""Qwen-Image-Edit and Edit-Plus on tiny random-init models of their real diffusers classes: the control images are
read by Qwen2.5-VL with the caption and enter the transformer as the pipeline feeds them; one trained 2-step LoRA
samples from a control image, resumes exactly, caches each pair's text encoding and loads in the edit pipeline with
every key used. The shared pair builders and the trained-run record are test_edit_models.py's."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import events, train
from PIL import Image
from test_edit_models import FAST, Run, _trained, _two_references, _values

from trainers.methods.lora.file_format import read_lora_file
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.edit import encode_controls


@pytest.fixture(scope="module")
def qwen_edit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainers.models.qwen_image_edit.tiny import build_tiny_qwen_image_edit

    return build_tiny_qwen_image_edit(tmp_path_factory.mktemp("qwen-edit") / "model")


def test_qwen_edit_reads_the_control_in_its_text_encoder_and_transformer(qwen_edit_dir: Path) -> None:
    model = load_model(str(qwen_edit_dir), "auto", torch.float32)
    family = model.family
    assert family.name == "qwen_image_edit"
    torch.manual_seed(0)
    noisy, pixels = torch.randn(1, 4, 8, 8), torch.rand(1, 3, 64, 64)

    def predict(control_pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        family.slot.pixels = [control_pixels]
        family.slot.latents = [encode_controls(family, model.vae, control_pixels)]
        try:
            with torch.no_grad():
                hidden, mask = model.encode_texts(["make it blue"], 1)
                return hidden, family.denoise(model.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
        finally:
            family.slot.latents = family.slot.pixels = None

    hidden, pred = predict(pixels)
    assert pred.shape == noisy.shape  # the target's tokens alone come back: the loss sees nothing else
    changed = pixels.clone()
    changed[0, :, 0, 0] = 1 - changed[0, :, 0, 0]
    changed_hidden, changed_pred = predict(changed)
    assert (changed_hidden - hidden).abs().max() > 0  # Qwen2.5-VL reads the control image with the caption
    assert (changed_pred - pred).abs().max() > 1e-6
    issues = model_issues(_values(qwen_edit_dir, cache_text_encoder_outputs=True, flip_aug=True,
                                  sample_prompt_lines=["make it blue"]))
    assert {i.field for i in issues} >= {"cache_text_encoder_outputs", "sample_prompt_lines"}  # flip_aug: named


@pytest.fixture(scope="module")
def qwen_edit_run(qwen_edit_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _trained(qwen_edit_dir, tmp_path_factory.mktemp("qwen-edit-run"), steps=1)  # its pipeline works at 1 MP


@pytest.mark.slow
def test_qwen_edit_lora_samples_resumes_and_loads_in_the_edit_pipeline(qwen_edit_dir: Path,
                                                                       qwen_edit_run: Run) -> None:
    from diffusers import QwenImageEditPipeline

    run = qwen_edit_run
    sample = Path(next(e for e in events(run.straight) if e["type"] == "sample")["path"])
    assert Image.open(sample).size == (64, 64)
    assert "lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight" in run.lora  # Qwen-Image's (ComfyUI's) names
    assert run.lora.keys() == run.resumed.keys()
    assert max((run.lora[k] - run.resumed[k]).abs().max().item() for k in run.lora) < 1e-6
    model = load_model(str(qwen_edit_dir), "auto", torch.float32)
    pipe = QwenImageEditPipeline(scheduler=model.noise_scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                                 tokenizer=model.tokenizers[0], processor=None, transformer=model.unet)
    converted = model.family.lora_for_pipeline(run.lora, model)
    pipe.load_lora_weights(converted)
    loaded = {f"transformer.{name}" for name, module in pipe.transformer.named_modules()
              if hasattr(module, "lora_A") and module.lora_A}
    assert loaded == {k.removesuffix(".lora_A.weight") for k in converted if k.endswith("lora_A.weight")}


@pytest.mark.slow
def test_qwen_edit_caches_each_pairs_text_encoding(qwen_edit_dir: Path, qwen_edit_run: Run) -> None:
    import os

    from trainers.models.edit_texts import pair_key

    tmp = run.out.parent if (run := qwen_edit_run) else None
    assert tmp is not None
    assert train("lora", tmp / "cached", pretrained_model_name_or_path=str(qwen_edit_dir),
                 train_data_dir=str(tmp / "data"), control_directory=str(tmp / "controls"),
                 output_dir=str(tmp / "out"), **FAST, max_train_steps=1, output_name="cached",
                 cache_text_encoder_outputs=True, network_train_unet_only=True) == 0

    def first_loss(folder: Path) -> float:
        return next(e["loss"] for e in events(folder) if e["type"] == "progress")

    # the encodings made before the first step, each with its pair's control, are those the uncached run made
    assert first_loss(tmp / "cached") == pytest.approx(first_loss(run.straight), rel=1e-6, abs=0)
    control = tmp / "controls" / "000_red_circle.png"
    before = pair_key("mirror it", (control,), (64, 64))
    os.utime(control, ns=(control.stat().st_atime_ns, control.stat().st_mtime_ns + 10**9))
    assert pair_key("mirror it", (control,), (64, 64)) != before  # a changed control is encoded again


def test_qwen_edit_plus_reads_several_labelled_references(tmp_path: Path) -> None:
    from trainers.models.qwen_image_edit.tiny import build_tiny_qwen_image_edit

    folder = build_tiny_qwen_image_edit(tmp_path / "model", pipeline_class="QwenImageEditPlusPipeline")
    model = load_model(str(folder), "auto", torch.float32)
    family = model.family
    assert family.name == "qwen_image_edit_plus" and family.max_controls == 3
    torch.manual_seed(0)
    noisy, first, second = torch.randn(1, 4, 8, 8), torch.rand(1, 3, 64, 64), torch.rand(1, 3, 32, 48)

    def predict(references: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        family.slot.pixels = references
        family.slot.latents = [encode_controls(family, model.vae, pixels) for pixels in references]
        try:
            with torch.no_grad():
                hidden, mask = model.encode_texts(["put the hat on the cat"], 1)
                return hidden, family.denoise(model.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
        finally:
            family.slot.latents = family.slot.pixels = None

    hidden, pred = predict([first, second])
    assert pred.shape == noisy.shape  # two references of their own sizes in, the target's tokens alone out
    other_hidden, other_pred = predict([first, torch.rand(1, 3, 32, 48)])
    assert (other_hidden - hidden).abs().max() > 0 and (other_pred - pred).abs().max() > 1e-6
    one_hidden, _ = predict([first])
    assert one_hidden.shape[1] < hidden.shape[1]  # "Picture 2: " and its image's tokens are gone


@pytest.mark.slow
def test_qwen_edit_plus_lora_trains_with_two_references_and_loads_in_its_pipeline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from diffusers import QwenImageEditPlusPipeline
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus

    from trainers.models.qwen_image_edit.tiny import build_tiny_qwen_image_edit

    # the pipeline encodes each reference at 1024x1024 pixels' area: the tiny model's samples at 64x64 (time only)
    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "VAE_IMAGE_SIZE", 64 * 64)
    folder = build_tiny_qwen_image_edit(tmp_path / "model", pipeline_class="QwenImageEditPlusPipeline")
    data, controls, prompts = _two_references(tmp_path)
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(folder), train_data_dir=str(data),
                 control_directory=str(controls), output_dir=str(tmp_path / "out"), output_name="plus", **FAST,
                 max_train_steps=2, sample_prompt_lines=prompts, sample_every_n_steps=2) == 0
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    samples = [torch.tensor(list(Image.open(e["path"]).convert("RGB").getdata())) for e in evs if e["type"] == "sample"]
    assert len(samples) == 2 and samples[0].shape == (64 * 64, 3)
    assert (samples[0] - samples[1]).abs().max() > 0  # one seed, another pair of references: the pipeline read them
    lora, metadata = read_lora_file(tmp_path / "out" / "plus.safetensors")
    assert metadata["ss_base_model_version"] == "qwen_image_edit"  # as musubi-tuner writes Edit-2509/2511 LoRAs
    model = load_model(str(folder), "auto", torch.float32)
    pipe = QwenImageEditPlusPipeline(scheduler=model.noise_scheduler, vae=model.vae,
                                     text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0],
                                     processor=None, transformer=model.unet)
    converted = model.family.lora_for_pipeline(lora, model)
    pipe.load_lora_weights(converted)
    loaded = {f"transformer.{name}" for name, module in pipe.transformer.named_modules()
              if hasattr(module, "lora_A") and module.lora_A}
    assert loaded == {k.removesuffix(".lora_A.weight") for k in converted if k.endswith("lora_A.weight")}
