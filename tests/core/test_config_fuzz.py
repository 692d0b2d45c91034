"""Random and malformed configs: every failure is a clear ConfigError, never a traceback."""
from __future__ import annotations

import string
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainers.core.options import OPTIONS, ConfigError, config_from_dict, load_config
from trainers.core.options.schema import GROUPS
from trainers.preflight.validate import validate

NAMES = [o.name for o in OPTIONS]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=30))
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=8), scalars, max_size=3))
keys = st.one_of(st.sampled_from(NAMES), st.text(string.ascii_letters + "_", min_size=1, max_size=25))
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def checked(flat: dict, method: str) -> None:
    try:
        cfg = config_from_dict(method, flat)
    except ConfigError as err:
        assert err.issues and all(i.field and i.message for i in err.issues)
        return
    for issue in validate(cfg, check_paths=True):
        assert issue.field and issue.message


@FUZZ
@given(st.dictionaries(keys, values, max_size=8), st.sampled_from(["lora", "dreambooth", "finetune"]))
def test_random_values_give_clear_messages(flat: dict, method: str) -> None:
    checked(flat, method)


@FUZZ
@given(st.dictionaries(st.sampled_from(list(GROUPS) + ["bogus"]), st.dictionaries(keys, values, max_size=4),
                       max_size=4))
def test_random_sections_give_clear_messages(sections: dict) -> None:
    from trainers.core.options.loading import flatten

    issues: list = []
    flat = flatten(sections, issues)
    checked(flat, "lora")


@FUZZ
@given(st.text(max_size=200))
def test_malformed_toml_text_is_reported_with_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.toml"
    path.write_text(text, encoding="utf-8")
    try:
        load_config("lora", path)
    except ConfigError as err:
        assert err.issues and all(i.message for i in err.issues)


def test_secret_keys_are_refused() -> None:
    try:
        config_from_dict("lora", {"huggingface_token": "hf_abcdefgh", "wandb_api_key": "x"})
    except ConfigError as err:
        assert {i.field for i in err.issues} == {"huggingface_token", "wandb_api_key"}
        assert all("environment" in i.message for i in err.issues)
    else:
        raise AssertionError("secret keys were accepted")
