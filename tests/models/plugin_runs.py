"""The runs of test_flow_plugins.py for a flow family whose tests live in their own module (Qwen-Image, Lumina 2):
its `runs` fixture's body, for one plug-in."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import test_flow_plugins as shared


def trained_runs(plugin: shared.Plugin, factory: pytest.TempPathFactory) -> tuple[shared.Plugin, shared.Runs]:
    """A 4-step LoRA (a sample at its end, a state at step 2), the same resumed from step 2, a 2-step finetune."""
    shared.PLUGINS.setdefault(plugin.name, plugin)
    return shared.runs.__wrapped__(SimpleNamespace(param=plugin.name), factory)
