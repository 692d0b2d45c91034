"""sd3_train.py's t5xxl_dtype (the precision T5-XXL is kept and run in) and text_encoder_batch_size (captions encoded
at once while caching the text encoders' outputs), on the tiny SD3 and FLUX models."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trainers.core.options import BY_NAME, load_config
from trainers.models import family, load_model


def _defaults(**values: object) -> dict[str, object]:
    return {**{name: option.default for name, option in BY_NAME.items()}, **values}


@torch.no_grad()
def test_t5xxl_dtype_is_the_precision_t5_runs_in_under_any_autocast(tiny_sd3_dir: Path) -> None:
    model = load_model(str(tiny_sd3_dir), "auto", torch.float32)
    captions = ["a red circle", "sks shape, a blue square on grey"]
    exact, _ = model.encode_texts(captions, 1)
    t5_tokens = exact.shape[1] - 77  # CLIP's 77 states first, then T5's
    t5 = model.text_encoders[-1]
    model = replace(model, family=model.family.configured(_defaults(t5xxl_dtype="float32")))
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the run's mixed precision does not reach T5
        kept, _ = model.encode_texts(captions, 1)
    assert next(t5.parameters()).dtype == torch.float32
    assert torch.equal(kept[:, -t5_tokens:], exact[:, -t5_tokens:])
    model = replace(model, family=model.family.configured(_defaults(t5xxl_dtype="bf16")))
    low, _ = model.encode_texts(captions, 1)
    assert next(t5.parameters()).dtype == torch.bfloat16 and low.dtype == torch.bfloat16
    assert not torch.equal(low[:, -t5_tokens:].float(), exact[:, -t5_tokens:])
    assert torch.allclose(low[:, -t5_tokens:].float(), exact[:, -t5_tokens:], rtol=0.05, atol=0.05 * float(
        exact[:, -t5_tokens:].abs().max()))


def test_the_options_are_read_where_sd_scripts_has_them() -> None:
    sd1, sd3, flux = family("sd1"), family("sd3"), family("flux")
    both = _defaults(t5xxl_dtype="float32", text_encoder_batch_size=4)
    assert sd3.option_issues(both) == []
    assert [i.field for i in flux.option_issues(both)] == ["t5xxl_dtype"]  # sd-scripts' FLUX trainers have no such
    assert {i.field for i in sd1.option_issues(both)} == {"t5xxl_dtype", "text_encoder_batch_size"}
    assert flux.option_issues(_defaults(text_encoder_batch_size=4)) == []


def test_kohya_files_set_them_in_sd_scripts_spellings(tmp_path: Path) -> None:
    toml = tmp_path / "sd3.toml"
    toml.write_text('t5xxl_dtype = "fp32"\ntext_encoder_batch_size = 8\nclip_l = "/c.safetensors"\n', encoding="utf-8")
    cfg = load_config("finetune", toml)
    assert (cfg.t5xxl_dtype, cfg.text_encoder_batch_size) == ("float32", 8)
    fields = {"sd3_checkbox": True, "pretrained_model_name_or_path": "/m/sd3.safetensors", "learning_rate": 1e-5,
              "t5xxl_dtype": "bf16", "sd3_text_encoder_batch_size": 2, "train_dir": "/t", "image_folder": ""}
    kohya = tmp_path / "sd3.json"
    kohya.write_text(json.dumps(fields), encoding="utf-8")
    cfg = load_config("finetune", kohya)
    assert (cfg.t5xxl_dtype, cfg.text_encoder_batch_size) == ("bf16", 2)
    sdxl = kohya.with_name("sdxl.json")  # kohya_ss passes them for SD3 only
    sdxl.write_text(json.dumps({**fields, "sd3_checkbox": False, "sdxl": True}), encoding="utf-8")
    cfg = load_config("finetune", sdxl)
    assert (cfg.t5xxl_dtype, cfg.text_encoder_batch_size) == ("auto", None)


@pytest.mark.slow
def test_an_sd3_lora_caches_captions_in_batches_of_text_encoder_batch_size(tiny_sd3_dir: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import train

    from trainers.data import cache as cache_module
    from trainers.data import pipeline
    from trainers.demo import build_dataset

    batches: list[tuple[int, torch.dtype]] = []
    real = cache_module.build_text_cache

    def spying(captions, encode, *args, **kwargs):  # type: ignore[no-untyped-def]
        def spy(caps: list[str]):  # type: ignore[no-untyped-def]
            hidden, pooled = encode(caps)
            batches.append((len(caps), hidden.dtype))
            return hidden, pooled
        return real(captions, spy, *args, **kwargs)

    monkeypatch.setattr(pipeline, "build_text_cache", spying)
    data = build_dataset(tmp_path / "data", size=64)  # 8 images, 8 captions
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_sd3_dir), train_data_dir=str(data),
                 output_dir=str(tmp_path / "out"), resolution="64", max_train_steps=1, max_data_loader_n_workers=0,
                 network_train_unet_only=True, cache_text_encoder_outputs=True, text_encoder_batch_size=3,
                 t5xxl_dtype="bf16") == 0
    assert [size for size, _ in batches] == [3, 3, 2]
    assert {dtype for _, dtype in batches} == {torch.bfloat16}  # T5's states (CLIP's joined in its dtype)
