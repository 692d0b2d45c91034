"""The generic flow-matching layer (trainers/models/flow.py): what a family describes through its hooks, and frozen
text encoders in eval mode (issue 27 item 5)."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from trainers.models import load_model
from trainers.train.diffusion import NoisePredictor


def test_frozen_text_encoders_stay_in_eval_mode_in_training_steps(tiny_flux_dir: Path) -> None:
    """The loop puts the predictor in training mode every epoch; the text encoders that are not trained must not
    follow (T5's dropout is 0.1): they run in eval mode, while the transformer trains."""
    model = load_model(str(tiny_flux_dir), "auto", torch.float32)
    for module in (model.unet, model.vae, *model.text_encoders):
        module.requires_grad_(False)
    predictor = NoisePredictor(model, None, 1, train_text_encoder=False, memoize=False)
    predictor.train()
    modes: list[tuple[str, bool]] = []
    hooks = [m.register_forward_pre_hook(lambda module, args: modes.append((type(module).__name__, module.training)))
             for encoder in model.text_encoders for m in encoder.modules()
             if m is encoder or isinstance(m, nn.Dropout)]
    try:
        ids = model.tokenize(["a red circle", "sks"])
        predictor(torch.randn(2, 4, 8, 8), torch.tensor([500.0, 100.0]), ids, None)
    finally:
        for hook in hooks:
            hook.remove()
    assert {name for name, _ in modes} >= {"CLIPTextModel", "T5EncoderModel", "Dropout"}
    assert [name for name, training in modes if training] == []
    assert predictor.unet.training


def test_zimage_captions_are_encoded_as_its_pipeline_encodes_them(tmp_path: Path) -> None:
    """Training encodes a caption in Qwen3's chat template and reads the same states ZImagePipeline does."""
    from diffusers import ZImagePipeline

    from trainers.models.zimage.tiny import build_tiny_zimage

    folder = build_tiny_zimage(tmp_path / "zimage")
    model = load_model(str(folder), "auto", torch.float32)
    ours = model.family.pipeline_embeds(*model.encode_texts(["sks shape, a red circle", "blurry"], 1))
    pipe = ZImagePipeline.from_pretrained(folder)
    with torch.no_grad():
        theirs, negative = pipe.encode_prompt("sks shape, a red circle", negative_prompt="blurry")
    assert torch.allclose(ours["prompt_embeds"][0], theirs[0], atol=1e-6)
    assert torch.allclose(ours["negative_prompt_embeds"][0], negative[0], atol=1e-6)
