"""A hostile user's configs: over a thousand broken ones, generated from fixed seeds (never flaky), each loaded and
validated as `python -m trainers preflight`, the GUI's Validate and the trainer's start-up do.

Every one must end in a clear refusal that names the field (or the config file), never in a traceback; nothing is
executed and nothing is written. Prints the counts for the record.
"""
from __future__ import annotations

import math
import os
import random
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from trainers.core.errors import ConfigError
from trainers.core.options import OPTIONS, load_config
from trainers.core.registry import METHOD_NAMES
from trainers.demo import build_dataset
from trainers.preflight.validate import validate

SEEDS = range(1200)
MARKER = Path("/tmp/atelier-hostile-marker")
PATHS = ["/proc/self/environ", "/dev/null", "/", "~", "x" * 5000, "a/" * 3000, "\0evil", "/etc/passwd",
         "$(touch /tmp/atelier-hostile-marker)", "../../../../etc", "ü" * 300, "C:\\windows\\system32", " "]
NUMBERS = [-1, 0, 2**32, 2**63, -(2**63), 10**400, 1e308, math.inf, -math.inf, math.nan, 0.5, -0.0, 1e-320]
STRINGS = ["", " ", "\n", "\0", "x" * 100_000, "🙂" * 50, "'\"", "[section]", "nan", "true", "None", "/"] + PATHS
ODD = [None, True, [], {}, [[1]], {"a": {"b": 1}}, [1, "a", True], {"": ""}, [None]]


def _base(tmp: Path, model: Path) -> dict[str, Any]:
    """A config that validates: each broken one is refused for what was broken."""
    data = build_dataset(tmp / "data")
    return {"pretrained_model_name_or_path": str(model), "train_data_dir": str(data),
            "output_dir": str(tmp / "out"), "max_train_steps": 1}


def _value(rng: random.Random) -> Any:
    pool = rng.choice([NUMBERS, STRINGS, ODD, PATHS])
    return rng.choice(pool)


def _mutate(rng: random.Random, values: dict[str, Any]) -> dict[str, Any] | str:
    """One hostile change: a value of the wrong kind or range, an unknown or secret key, a deep nesting, or text
    that is not TOML at all (returned as the file's text)."""
    kind = rng.randrange(8)
    name = rng.choice(OPTIONS).name
    if kind <= 2:
        values[name] = _value(rng)
    elif kind == 3:
        values[rng.choice(["netwrk_dim", "hf_token", "api_key", "x" * 300, "", "ü", "a.b", "[x]"])] = _value(rng)
    elif kind == 4:
        depth = rng.choice([2, 50, 3000])
        values[name] = "[" * depth + "]" * depth if rng.random() < 0.5 else {"k": 1}
        if depth > 100 and rng.random() < 0.5:
            return f"{name} = " + "[" * depth + "]" * depth
    elif kind == 5:
        section = rng.choice(["model", "optimizer", "nosuch", "dataset", "model_arguments"])
        values[section] = {name: _value(rng)} if rng.random() < 0.7 else _value(rng)
    elif kind == 6:
        return rng.choice(["a = = 1", "[[[x", "\xff\xfe garbage", "x = 'unterminated", "= 1", "[a]\n[a]\n",
                           "a = 1\na = 2", "\ufeffmethod = 'lora'", "key = 1979-05-27T07:32:00Z"])
    else:
        values["schema_version"] = rng.choice([99, -1, "1", 1.5, True, 0])
    return values


def _toml(values: dict[str, Any]) -> str:
    try:
        return tomlkit.dumps({k: v for k, v in values.items() if v is not None})
    except Exception:  # noqa: BLE001 - values TOML cannot hold become text TOML cannot read: also hostile
        return "\n".join(f"{k} = {v!r}" for k, v in values.items())


def test_a_thousand_broken_configs_are_refused_by_name(tmp_path: Path, tiny_sd1_dir: Path) -> None:
    base = _base(tmp_path, tiny_sd1_dir)
    assert not validate(load_config("lora", overrides=[f"{k}={v!r}" for k, v in base.items()]))
    before = {p for p in tmp_path.rglob("*")}
    counts = {"tried": 0, "refused": 0, "accepted": 0}
    for seed in SEEDS:
        rng = random.Random(seed)
        mutated: dict[str, Any] | str = dict(base)
        for _ in range(rng.randint(1, 3)):
            mutated = _mutate(rng, mutated) if isinstance(mutated, dict) else mutated
        text = mutated if isinstance(mutated, str) else _toml(mutated)
        path = tmp_path / f"c{seed}.toml"
        path.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
        method = rng.choice(METHOD_NAMES)
        counts["tried"] += 1
        try:
            issues = validate(load_config(method, path, warnings=[]))
        except ConfigError as err:
            issues = err.issues
        except Exception as err:  # noqa: BLE001 - the one thing that must never happen
            pytest.fail(f"seed {seed}: {type(err).__name__}: {err}\n--- config ---\n{text[:400]}")
        if issues:
            counts["refused"] += 1
            for issue in issues:
                assert issue.field and issue.message, (seed, issue)
        else:
            counts["accepted"] += 1
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(p.suffix == ".toml" and p.parent == tmp_path for p in created), "validation wrote files"
    assert not MARKER.exists(), "a value was executed"
    print(f"\nhostile configs: {counts}")
    assert counts["tried"] >= 1000 and counts["refused"] >= 0.5 * counts["tried"]


def test_values_tomllib_cannot_represent_are_refused_cleanly(tmp_path: Path) -> None:
    for text in ("seed = nan", "seed = inf", "learning_rate = -inf", f"seed = {2**64}", "network_dim = 1e400"):
        path = tmp_path / "c.toml"
        path.write_text(text, encoding="utf-8")
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            pass
        with pytest.raises(ConfigError):
            load_config("lora", path)
    assert os.listdir(tmp_path) == ["c.toml"]
