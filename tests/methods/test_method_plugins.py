"""A method is a folder: a throwaway one, registered with one registry entry, gets its options into the schema, the
page's tab, Validate, TOML, presets, the CLI and docs/options.md with no edit anywhere else."""
from __future__ import annotations

from pathlib import Path

from tests.helpers import run_plugin_probe, write_plugin_package


OPTIONS_PY = '''
from trainers.core.options.schema import Option
from trainers.core.registry import only

GROUPS = {"glaze": "Glaze"}
OPEN_GROUPS = ("glaze",)
OPTIONS = (
    Option("glaze_strength", "float", 0.5, "How strong the glaze is.", "glaze", methods=only("glaze"), min=0),
    Option("glaze_word", "str", "", "The word the glaze learns.", "dataset", methods=only("glaze"), required=True),
)
'''
RULES_PY = '''
from pathlib import Path
from trainers.core.errors import ConfigIssue

def issues(cfg):
    if cfg.glaze_strength > 1:
        return [ConfigIssue("glaze_strength", "is above 1: the glaze would crack", "glaze")]
    return []

def outputs(cfg):
    return [Path(cfg.output_dir) / f"{cfg.output_name}.glaze"]

def output_suffix(cfg):
    return ".glaze"

def memory_tips(cfg):
    return []
'''
PROBE = '''
import json, sys
from trainers.core import registry

registry.METHODS += (registry.MethodSpec("glaze", "Glaze", "glazes", "plugins_for_test.glaze", "glaze a model"),)
registry.METHOD_NAMES += ("glaze",)

import gradio as gr
from gui.checks import check_form
from gui.forms import build_form
from gui.presets import Presets
from trainers.__main__ import _parser
from trainers.core.errors import ConfigError
from trainers.core.options import GROUPS, load_config
from trainers.core.options.docs import options_markdown
from trainers.adapters.kohya.export import sd_scripts_command

preset_dir, data_dir, out_dir = sys.argv[1:4]
with gr.Blocks():
    form = build_form("glaze")
presets = Presets(user_dir=__import__("pathlib").Path(preset_dir))
cfg = load_config("glaze", overrides=["glaze_strength=0.75", "glaze_word='shiny'"])
again = load_config("glaze", overrides=[])
report = check_form("glaze", {"train_data_dir": data_dir, "output_dir": out_dir, "glaze_strength": 3.0,
                              "glaze_word": ""})
try:
    sd_scripts_command(cfg)
    exported = ""
except ConfigError as err:
    exported = str(err)
print(json.dumps({
    "groups": list(GROUPS),
    "widgets": sorted(form.widgets),
    "accordions": sorted(form.accordions),
    "open": sorted(g for g, a in form.accordions.items() if a.open),
    "toml": cfg.to_toml(),
    "output_name": again.output_name,
    "issues": [[i.field, i.message] for i in report.issues],
    "presets": presets.names("glaze"),
    "preset": presets.load("user: mine", "glaze")[0] if presets.names("glaze") else None,
    "docs": options_markdown(),
    "commands": sorted(_parser()._subparsers._group_actions[0].choices),
    "exported": exported,
}))
'''


def _plugin_package(root: Path) -> None:
    write_plugin_package(root, "glaze", {"options.py": OPTIONS_PY, "rules.py": RULES_PY})


def test_a_method_folder_is_picked_up_with_no_other_edits(tmp_path: Path) -> None:
    _plugin_package(tmp_path / "src")
    seen = run_plugin_probe(tmp_path, PROBE, "mine",
                            'schema_version = 1\nmethod = "glaze"\n\n[glaze]\nglaze_strength = 0.25\n')
    # Its own section, after "What to train", in the schema, the page's tab, the TOML and the docs.
    assert seen["groups"].index("training") < seen["groups"].index("glaze") < seen["groups"].index("optimizer")
    assert {"glaze_strength", "glaze_word"} <= set(seen["widgets"]) and "glaze" in seen["accordions"]
    assert "network_dim" not in seen["widgets"] and "use_ema" not in seen["widgets"]  # it trains neither
    assert seen["open"] == ["glaze", "optimizer"]  # its own section opens on its tab
    assert "[glaze]\nglaze_strength = 0.75" in seen["toml"] and "glaze_word = \"shiny\"" in seen["toml"]
    assert seen["output_name"] == "glaze"
    assert "## [glaze] Glaze" in seen["docs"] and "| `glaze_strength` | `0.5` |" in seen["docs"]
    # Validate: the schema's checks (a required option) and the method's own rules, each named.
    issues = dict(seen["issues"])
    assert "glaze_word" in issues and "the glaze would crack" in issues["glaze_strength"]
    assert seen["presets"] == ["user: mine"] and seen["preset"] == {"glaze_strength": 0.25}
    assert "glaze" in seen["commands"]  # python -m trainers glaze
    assert "sd-scripts has no script that trains Glaze" in seen["exported"]
