"""The typed option slices (trainers/core/options/typed.py): current with the declarations, and every value a
run can hold has its slice field's type."""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

import pytest

from trainers.core.options import OPTIONS, TrainConfig, load_config
from trainers.core.options import typed, typed_gen
from trainers.core.registry import METHOD_NAMES


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` is of the (generated) annotation `hint`."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arm) for arm in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, tuple) and all(conforms(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def test_the_checked_in_slices_are_what_the_declarations_give() -> None:
    assert typed_gen.TARGET.read_text(encoding="utf-8") == typed_gen.render(), \
        "typed.py is out of date: run python -m trainers.core.options.typed_gen"


def test_every_option_is_a_field_of_its_groups_slice() -> None:
    fields = {f.name: cls for cls in typed.SLICES for f in dataclasses.fields(cls)}
    assert sorted(fields) == sorted(o.name for o in OPTIONS)
    for option in OPTIONS:
        assert fields[option.name].GROUP == option.group
        assert fields[option.name].option(option.name) is option


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_each_methods_defaults_have_their_fields_types(method: str) -> None:
    cfg = TrainConfig(method)
    for cls in typed.SLICES:
        view = cls.of(cfg)
        hints = typing.get_type_hints(cls, vars(typed))
        for field in dataclasses.fields(cls):
            value = getattr(view, field.name)
            assert conforms(value, hints[field.name]), (method, field.name, value, hints[field.name])
            if field.name in cfg.values:
                expected = cfg.values[field.name]
                assert value == (tuple(expected) if isinstance(expected, list) else expected)


def test_a_loaded_configs_values_are_read_typed_and_frozen() -> None:
    cfg = load_config("lora", overrides=["learning_rate=3e-4", "optimizer_args=['weight_decay=0.1']",
                                         "text_encoder_lr=[5e-5, 2e-5]", "save_every_n_steps=7"])
    optimizer, saving = typed.OptimizerOptions.of(cfg), typed.SavingOptions.of(cfg)
    assert optimizer.learning_rate == 3e-4 and optimizer.optimizer_args == ("weight_decay=0.1",)
    assert optimizer.text_encoder_lr == (5e-5, 2e-5)
    assert saving.save_every_n_steps == 7
    hints = typing.get_type_hints(typed.OptimizerOptions, vars(typed))
    assert conforms(optimizer.text_encoder_lr, hints["text_encoder_lr"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        optimizer.learning_rate = 1.0  # type: ignore[misc]
    # from the plain values too, and an option the method does not use has its declared default
    assert typed.OptimizerOptions.of(cfg.values) == optimizer
    finetune = TrainConfig("finetune")
    assert "network_dim" not in finetune.values
    assert typed.NetworkOptions.of(finetune).network_dim == typed.NetworkOptions.option("network_dim").default
