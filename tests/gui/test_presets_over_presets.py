"""A built-in preset chosen over another (the demo's, say) leaves a form that validates: what it does not name is
back at its default, the user's own paths and words stay. User presets still set only what they name."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gui.forms import from_widget, to_widget
from gui.presets import YOURS, Presets
from trainers.core.options import TrainConfig, config_from_dict, options_for
from trainers.core.registry import METHOD_NAMES
from trainers.preflight.validate import validate


def _apply(form: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    return {**form, **values}


def _problems(method: str, form: dict[str, Any]) -> list[str]:
    """What Validate names, short of the paths and words only the user can give (the disk is not looked at). The
    values go through the widgets, as the page's form holds them."""
    options = {opt.name: opt for opt in options_for(method)}
    shown = {name: from_widget(options[name], to_widget(options[name], value)) for name, value in form.items()}
    cfg = config_from_dict(method, shown)
    return [f"{i.field}: {i.message}" for i in validate(cfg, check_paths=False) if i.field not in YOURS]


def test_every_built_in_preset_over_every_other_leaves_a_form_that_validates(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The option values only: the demo presets' relative paths name nothing here, so no model is read (a kept model
    # of another family than the preset's is its path's problem, which Validate names).
    monkeypatch.chdir(tmp_path)
    presets = Presets(tmp_path / "user")
    failures: list[str] = []
    for method in METHOD_NAMES:
        fresh = TrainConfig(method).values
        loaded = {name: presets.load(name, method)[0] for name in presets.names(method)}
        # Many pairs leave the same form, each distinct one is validated once: the form of `second` over `first` is
        # told by `second` and the values of `first`'s form that `second` does not set.
        checked: dict[tuple[str, str], list[str]] = {}
        unset = {name: [k for k in fresh if k not in values] for name, values in loaded.items()}
        for first, first_values in loaded.items():
            over_first = _apply(fresh, first_values)
            for second, second_values in loaded.items():
                key = (second, repr([over_first[k] for k in unset[second]]))
                if key not in checked:
                    checked[key] = _problems(method, _apply(over_first, second_values))
                if checked[key]:
                    failures.append(f"{method}: {second} over {first}: {checked[key]}")
    assert not failures, "\n".join(failures[:20])


def test_a_built_in_preset_keeps_the_user_s_paths_and_resets_the_rest(tmp_path: Path) -> None:
    presets = Presets(tmp_path / "user")
    demo, _ = presets.load("demo", "lora")
    mine = {"pretrained_model_name_or_path": "/models/qwen", "train_data_dir": "/data/me", "output_name": "mine"}
    form = _apply(_apply(TrainConfig("lora").values, demo), mine)
    qwen, said = presets.load("qwen_image_lora_24gb", "lora")
    after = _apply(form, qwen)
    assert {name: after[name] for name in mine} == mine
    assert after["lr_warmup_steps"] == 0 and after["lr_scheduler"] == "constant"  # the demo's 0.1 warmup is gone
    assert after["sample_prompt_lines"] == demo["sample_prompt_lines"]  # the user's prompts stay
    assert "back at their defaults" in said[0]

    saved = presets.save("half", "lora", {"network_dim": 4})  # a user preset sets only what it names
    assert presets.load(saved, "lora")[0] == {"network_dim": 4}
