"""Every flow family has published sizes, so Validate estimates a run from a hub id before anything is downloaded."""
from __future__ import annotations

import pytest

from trainers import memory_estimate
from trainers.core.registry import FAMILY_NAMES
from trainers.models.rules import rules_of

# A hub id of each family and what its denoiser takes in bf16 (GB): its published parameter count, twice.
HUB_IDS = {"chroma": ("lodestones/Chroma1-HD", 17.8), "zimage": ("Tongyi-MAI/Z-Image-Turbo", 12.3),
           "lumina2": ("Alpha-VLLM/Lumina-Image-2.0", 5.2), "qwen_image": ("Qwen/Qwen-Image", 40.9),
           "qwen_image21": ("Qwen/Qwen-Image-2.1", 14.2), "flux2": ("black-forest-labs/FLUX.2-dev", 64.4),
           "krea2": ("krea/Krea-2", 25.6), "qwen_image_edit": ("Qwen/Qwen-Image-Edit", 40.9),
           "qwen_image_edit_plus": ("Qwen/Qwen-Image-Edit-2511", 40.9),
           "flux_kontext": ("black-forest-labs/FLUX.1-Kontext-dev", 23.8)}
KLEIN = {"black-forest-labs/FLUX.2-klein-4B": 7.8, "black-forest-labs/FLUX.2-klein-base-9B": 18.2}


def _report(monkeypatch: pytest.MonkeyPatch, family: str, model: str):
    from gui.checks import check_form

    monkeypatch.setattr(memory_estimate, "_cards", lambda: (("0", 12.0),))
    return check_form("lora", {"model_family": family, "pretrained_model_name_or_path": model, "resolution": "1024",
                               "mixed_precision": "bf16", "gradient_checkpointing": True, "network_dim": 16,
                               "cache_text_encoder_outputs": family not in ("qwen_image_edit", "qwen_image_edit_plus"),
                               "network_train_unet_only": True})


@pytest.mark.parametrize("family", sorted(HUB_IDS))
def test_validate_estimates_a_hub_id_of_each_flow_family(monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    model, denoiser_gb = HUB_IDS[family]
    report = _report(monkeypatch, family, model)
    assert f"denoiser weights {denoiser_gb}" in report.memory, report.memory
    # edit models: their base model's sizes
    assert "; from the published " in report.memory or "sizes in diffusers" in report.memory
    over = not memory_estimate.fits(memory_estimate.estimate_memory(report.cfg), 12.0)
    assert any("12 GB card" in warning for warning in report.warnings) == over


@pytest.mark.parametrize("model", sorted(KLEIN))
def test_flux2_klein_hub_ids_are_estimated_at_their_own_size(monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    report = _report(monkeypatch, "flux2", model)
    assert f"denoiser weights {KLEIN[model]}" in report.memory and "klein" in report.memory


def test_every_flow_family_has_published_sizes() -> None:
    lacking = [name for name in FAMILY_NAMES if rules_of(name).memory_facts is None]
    assert lacking == [], f"families without memory_facts: {lacking}"


@pytest.mark.parametrize("edit, base", [("flux_kontext", "flux"), ("qwen_image_edit", "qwen_image")])
def test_an_edit_models_activations_count_its_control_images_tokens(monkeypatch: pytest.MonkeyPatch, edit: str,
                                                                    base: str) -> None:
    edited, plain = (_report(monkeypatch, family, "some/hub-id").cfg for family in (edit, base))
    edited_gpu, plain_gpu = memory_estimate.estimate_memory(edited).gpu, memory_estimate.estimate_memory(plain).gpu
    assert edited_gpu["denoiser weights"] == plain_gpu["denoiser weights"]
    # the control's image tokens join the sequence, the caption's are not doubled
    assert 1.5 * plain_gpu["activations"] < edited_gpu["activations"] < 2 * plain_gpu["activations"]
