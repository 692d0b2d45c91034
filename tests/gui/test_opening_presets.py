"""With --demo each method tab that has a demo preset of its own opens on it: its widgets are built holding the
preset's values, so that a page load sends them nothing (issue 38 item 23)."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from gui.forms import build_form
from gui.page import opening_preset
from gui.presets import Presets
from trainers.core.registry import METHOD_NAMES


def test_with_the_demo_each_tab_opens_on_its_own_demo_preset(tmp_path: Path) -> None:
    presets = Presets(tmp_path / "user")
    opening = {method: opening_preset(presets, method, "demo", i == 0) for i, method in enumerate(METHOD_NAMES)}
    assert opening["lora"] == "demo" and opening["controlnet"] == "demo_controlnet"
    assert opening["dreambooth"] is None  # no demo of its own: the tab opens at the defaults, not on the LoRA's
    assert opening_preset(presets, "controlnet", None, False) is None


def test_a_form_is_built_holding_the_values_it_opens_on(tmp_path: Path) -> None:
    values, _ = Presets(tmp_path / "user").load("demo_controlnet", "controlnet")
    with gr.Blocks():
        form = build_form("controlnet", values)
        plain = build_form("controlnet")
    assert form.widgets["conditioning_data_dir"].value == "demo/controls"
    assert form.widgets["output_name"].value == "demo_controlnet"
    assert plain.widgets["output_name"].value != "demo_controlnet"  # without values: the defaults
    assert all(widget.value == shown for widget, shown in form.updates(values).items())  # as Load preset puts them
