"""Generate and the tools take every separate file a model is read with (trainers.models.rules.ModelFiles): a run
trained from split files (a Wan 2.2 pair's two experts, Anima's adapter, Wan 2.1 I2V's CLIP) renders from the same
files without retyping them."""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import toml

from trainers.generate.options import config_from_values
from trainers.generate.saves import compare_form_values
from trainers.models.rules import ModelFiles
from trainers.tools.options import by_name


def test_a_runs_separate_files_reach_the_compare_form_and_the_generate_config(tmp_path: Path) -> None:
    names = [f.name for f in fields(ModelFiles)]
    files = {name: str(tmp_path / "models é" / f"{name}.safetensors") for name in names}
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(toml.dumps({"method": "lora", "model": {
        "pretrained_model_name_or_path": str(tmp_path / "dit.safetensors"), **files}}), encoding="utf-8")
    values = compare_form_values(run)
    assert {name: values[name] for name in names} == files
    cfg = config_from_values({"model": str(tmp_path / "dit.safetensors"), **files})
    assert ModelFiles.from_values(cfg.values) == ModelFiles(**files)


def test_every_tool_that_loads_a_whole_model_takes_its_separate_files() -> None:
    for verb in ("merge", "extract", "convert"):
        assert {f.name for f in fields(ModelFiles)} <= set(by_name(verb)), verb
