"""Run state (the configured family, the noise schedule, the prompt format, cached texts, the latent memo) lives in the
run's view of the model, a LoadedModel made with dataclasses.replace, never written onto the model it was made from."""
from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from torch import nn

from trainers.core.options import TrainConfig
from trainers.data.prompt_chunks import PromptFormat
from trainers.models import LoadedModel, family
from trainers.train.session import run_model

TRAINERS = Path(__file__).resolve().parents[2] / "trainers"
# Fields only a LoadedModel has: an assignment to one anywhere in trainers/ writes run state onto a model.
RUN_FIELDS = ("prompt_format", "cached_texts", "latent_memo")


def loaded(scheduler: object = None) -> LoadedModel:
    return LoadedModel(family("sd1"), nn.Linear(2, 2), nn.Identity(), [nn.Identity()], ["tokenizer"], scheduler,
                       "epsilon", "in code")


def run_state_writes(source: str, name: str = "<planted>") -> list[str]:
    """`file:line attribute` of each assignment (plain, augmented, annotated or in a tuple) to a RUN_FIELDS attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr in RUN_FIELDS and isinstance(part.ctx, ast.Store):
                    found.append(f"{name}:{part.lineno} {part.attr}")
    return found


def test_no_code_in_trainers_writes_run_state_onto_a_model() -> None:
    writes = [w for path in sorted(TRAINERS.rglob("*.py"))
              for w in run_state_writes(path.read_text(encoding="utf-8"), str(path.relative_to(TRAINERS)))]
    assert writes == []


def test_the_scan_finds_a_planted_write() -> None:
    planted = "def f(model, texts):\n    model.cached_texts = texts\n    a, model.latent_memo = 1, None\n"
    assert run_state_writes(planted) == ["<planted>:2 cached_texts", "<planted>:3 latent_memo"]


@pytest.mark.parametrize("name", ["family", "tokenizers", "noise_scheduler", "prediction_type", "prompt_format",
                                  "cached_texts", "latent_memo", "vae", "text_encoders", "source", "new_attribute"])
def test_a_loaded_model_refuses_writes(name: str) -> None:
    model = loaded()
    with pytest.raises(AttributeError, match="dataclasses.replace"):
        setattr(model, name, None)


def test_a_view_is_made_with_replace_and_leaves_the_model_as_it_was() -> None:
    model = loaded()
    view = replace(model, prompt_format=PromptFormat(150, weighted=True), cached_texts="texts")
    assert view.prompt_format == PromptFormat(150, weighted=True) and view.cached_texts == "texts"
    assert model.prompt_format == PromptFormat() and model.cached_texts is None and view.unet is model.unet
    swapped = nn.Linear(2, 2)
    model.unet = swapped  # the denoiser stays swappable (ControlNet samples through its controlled one)
    assert model.unet is swapped


def test_the_runs_view_has_its_schedule_and_the_loaded_model_keeps_its_own() -> None:
    from diffusers import DDPMScheduler

    scheduler = DDPMScheduler(num_train_timesteps=1000, prediction_type="epsilon")  # as the loaders make it
    model = loaded(scheduler)
    v = run_model(TrainConfig("lora", {"v_parameterization": True}), model)
    assert v.prediction_type == "v_prediction" and v.noise_scheduler.config.prediction_type == "v_prediction"
    zero = run_model(TrainConfig("lora", {"zero_terminal_snr": True}), model)
    assert zero.noise_scheduler.config.rescale_betas_zero_snr and zero.unet is model.unet
    both = run_model(TrainConfig("lora", {"v_parameterization": True, "zero_terminal_snr": True}), model).noise_scheduler
    assert both.config.prediction_type == "v_prediction" and both.config.rescale_betas_zero_snr
    assert model.noise_scheduler is scheduler and model.prediction_type == "epsilon"
    assert scheduler.config.prediction_type == "epsilon" and not scheduler.config.rescale_betas_zero_snr
    plain = run_model(TrainConfig("lora", {}), model)
    assert plain.noise_scheduler is scheduler and plain.prediction_type == "epsilon" and plain is not model
