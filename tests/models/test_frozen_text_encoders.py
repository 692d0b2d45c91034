"""Families whose one text encoder (Qwen2.5-VL, Qwen3, Gemma 2) LoRAs never train: a text-encoder training option is
named at Validate rather than ignored; the [flow] options' help names every family that reads them."""
from __future__ import annotations

import pytest

from trainers.core.options import BY_NAME
from trainers.core.options.schema import Option
from trainers.core.options.training import in_group
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import all_rules, rules_of


def _defaults(**values: object) -> dict[str, object]:
    return {**{name: option.default for name, option in BY_NAME.items()}, **values}


@pytest.mark.parametrize(("name", "encoder"), [("qwen_image", "Qwen2.5-VL"), ("zimage", "Qwen3"),
                                               ("lumina2", "Gemma 2")])
def test_text_encoder_lora_options_are_named_for_frozen_encoders(name: str, encoder: str) -> None:
    rules = rules_of(name)
    assert rules.option_issues(_defaults()) == []
    asked = _defaults(text_encoder_lr=5e-5, network_train_text_encoder_only=True, loraplus_text_encoder_lr_ratio=4.0)
    named = {i.field: i.message for i in rules.option_issues(asked)}
    assert set(named) == {"text_encoder_lr", "network_train_text_encoder_only", "loraplus_text_encoder_lr_ratio"}
    assert all(f"{rules.title}'s {encoder} text encoder is never trained" in m for m in named.values())
    assert rules.option_issues(_defaults(text_encoder_lr=0.0)) == []  # 0: "do not train it", which holds


def test_flux_still_trains_its_clip_lora() -> None:
    assert rules_of("flux").option_issues(_defaults(text_encoder_lr=5e-5)) == []


def test_each_flow_option_help_names_every_family_that_reads_it() -> None:
    families = [r for r in all_rules() if isinstance(r, FlowRules)]
    for option in in_group("flow"):  # with the help the families' options.py assemble
        readers = [r.title for r in families if not r.option_issues(_defaults(**{option.name: _other(option)}))]
        assert readers and all(title in option.help for title in readers), (option.name, readers)


def _other(option: Option) -> object:
    """A value other than the option's default that any family reading the option takes."""
    if option.choices:
        return next(c for c in option.choices if c != option.default)
    if option.kind == "bool":
        return not option.default
    if isinstance(option.default, str):  # a file (training_adapter): a name, not read here
        return "other.safetensors"
    return 100 if option.default is None else option.default + 0.5
