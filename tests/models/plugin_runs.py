"""The runs of test_flow_plugins.py for a flow family whose tests live in their own module (Qwen-Image, Lumina 2):
its `runs` fixture's body, for one plug-in; and the Validate check of a family that also writes single files."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import test_flow_plugins as shared


def trained_runs(plugin: shared.Plugin, factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    """A 4-step LoRA (a sample at its end, a state at step 2), the same resumed from step 2, a 2-step finetune."""
    shared.PLUGINS.setdefault(plugin.name, plugin)
    return shared.runs.__wrapped__(SimpleNamespace(param=plugin.name), factory)


def check_validate_names_the_family(runs: tuple[shared.Plugin, shared.Runs]) -> None:
    """Validate names the family in what it refuses, before any weight loads, and takes save_model_as 'both' (the
    finetune's diffusers folder and its single file)."""
    from trainers.core.options import BY_NAME
    from trainers.models.checks import model_issues

    plugin, run = runs
    values = {**{n: o.default for n, o in BY_NAME.items()}, **plugin.options, "min_snr_gamma": 5.0,
              "save_model_as": "both", "pretrained_model_name_or_path": str(run.model_dir)}
    (issue,) = model_issues(values)
    assert issue.field == "min_snr_gamma" and plugin.title in issue.message
