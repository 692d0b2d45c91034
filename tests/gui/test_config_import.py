"""The page's Import on a form holding the demo preset: every option the file decides is set, whatever its value,
and the report lists each field it changes as old -> new."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gui.config_import import import_config
from gui.forms import option_for, to_widget
from gui.presets import Presets
from trainers.core.options import TrainConfig, options_for

REPO = Path(__file__).resolve().parents[2]


def demo_form(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Each tab's widget values as the page shows them with the demo preset loaded on the LoRA tab."""
    preset, _ = Presets(tmp_path / "user", REPO / "presets").load("demo", "lora")
    shown = {}
    for method in ("lora", "dreambooth", "finetune"):
        values = TrainConfig(method, preset if method == "lora" else {}).values
        shown[method] = {o.name: to_widget(o, values[o.name]) for o in options_for(method)}
    return shown


def apply(shown: dict[str, Any], method: str, values: dict[str, Any]) -> dict[str, Any]:
    """The form after the import's updates."""
    return {**shown, **{name: to_widget(option_for(method, name), value) for name, value in values.items()}}


def test_a_kohya_ss_json_at_atelier_s_defaults_changes_the_demo_form(tmp_path: Path) -> None:
    """The demo preset trains at 0.01, rank 8, batch 2 for 6 epochs; a kohya_ss JSON's 1e-4, rank 16 and batch 1
    (which are also Atelier's defaults) must replace them, and its max_train_steps must unset the epochs."""
    shown = demo_form(tmp_path)
    fields = {"LoRA_type": "Standard", "learning_rate": 0.0001, "network_dim": 16, "network_alpha": 8,
              "train_batch_size": 1, "max_train_steps": 400, "epoch": 0, "pretrained_model_name_or_path": "/m"}
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps(fields), encoding="utf-8")
    done = import_config(path, "lora", shown, tmp_path / "runs")
    assert done.method == "lora"
    after = apply(shown["lora"], "lora", done.values)
    assert (after["learning_rate"], after["network_dim"], after["train_batch_size"]) == ("0.0001", "16", "1")
    assert after["max_train_steps"] == "400" and after["max_train_epochs"] == ""
    assert after["network_alpha"] == shown["lora"]["network_alpha"]  # 8 in both: not listed as a change
    report = done.report
    for line in ("`learning_rate`: `0.01` → `0.0001`", "`network_dim`: `8` → `16`", "`train_batch_size`: `2` → `1`",
                 "`max_train_epochs`: `6` → (unset)", "`max_train_steps`: (unset) → `400`"):
        assert line in report, report
    assert "`network_alpha`" not in report
    assert "Fields the file does not name are unchanged" in report


def test_an_sd_scripts_toml_goes_to_its_method_s_tab_and_a_bad_file_is_named(tmp_path: Path) -> None:
    shown = demo_form(tmp_path)
    path = tmp_path / "db.toml"
    path.write_text('reg_data_dir = "/reg"\nmax_train_steps = 50\noutput_dir = "db_out"\n', encoding="utf-8")
    done = import_config(path, "lora", shown, tmp_path / "runs")
    assert done.method == "dreambooth" and "a dreambooth config: it went to this tab" in done.report
    assert done.values["output_dir"] == str(tmp_path / "runs" / "db_out")
    bad = tmp_path / "bad.toml"
    bad.write_text("network_module = \n", encoding="utf-8")
    refused = import_config(bad, "lora", shown, None)
    assert refused.method is None and "Import failed: `bad.toml`" in refused.report and "--config" in refused.report
