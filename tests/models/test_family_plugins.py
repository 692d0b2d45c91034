"""A model family is a folder: a throwaway one, registered with one registry entry, brings its own options (its own
section, a timestep_sampling value of its own, the shared options it reads named in their help) into the schema,
the page's tab, Validate, TOML, presets and docs/options.md with no edit anywhere else."""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from tests.helpers import run_plugin_probe, write_plugin_package
from trainers.core.options import groups
from trainers.core.registry import FAMILIES
from trainers.models.rules import rules_of

REPO = Path(__file__).resolve().parents[2]

OPTIONS_PY = '''
from trainers.core.options.schema import Option

GROUPS = {"glazed": "Glazed models"}
READS = frozenset({"timestep_sampling", "weighting_scheme"})
TIMESTEP_SAMPLINGS = {"glaze_shift": "uniform then glazed."}
NOTES = {"weighting_scheme": "a glaze draws by it too."}
OPTIONS = (
    Option("glaze_depth", "float", 0.5, "How deep the glaze goes.", "glazed", min=0, max=1),
)
'''
RULES_PY = '''
from pathlib import Path
from trainers.models.flow_rules import FlowRules


class GlazedRules(FlowRules):
    name = "glazed"
    title = "Glazed"
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = "GlazedPipeline"
    reference_prefixes = ("glaze_blocks.",)
    checkpoint_parts = ()


GLAZED = GlazedRules()
'''
PROBE = '''
import json, sys
from trainers.core import registry

registry.FAMILIES += (registry.FamilySpec("glazed", "plugins_for_test.glazed", "GLAZED", "Glazed"),)
registry.FAMILY_NAMES += ("glazed",)

import gradio as gr
from gui.checks import check_form
from gui.forms import build_form
from gui.presets import Presets
from trainers.core.options import BY_NAME, GROUPS, load_config
from trainers.core.options.docs import options_markdown
from trainers.models.rules import rules_of

preset_dir, data_dir, out_dir = sys.argv[1:4]
with gr.Blocks():
    form = build_form("lora")
presets = Presets(user_dir=__import__("pathlib").Path(preset_dir))
cfg = load_config("lora", overrides=["model_family='glazed'", "glaze_depth=0.75", "timestep_sampling='glaze_shift'"])
report = check_form("lora", {"train_data_dir": data_dir, "output_dir": out_dir, "glaze_depth": 3.0})
flow = {name: BY_NAME[name].default for name in BY_NAME if BY_NAME[name].group in ("flow", "glazed")}
print(json.dumps({
    "groups": list(GROUPS),
    "widgets": sorted(form.widgets),
    "accordions": sorted(form.accordions),
    "family_choices": list(BY_NAME["model_family"].choices),
    "help": {name: BY_NAME[name].help for name in ("glaze_depth", "timestep_sampling", "weighting_scheme")},
    "samplings": list(BY_NAME["timestep_sampling"].choices),
    "toml": cfg.to_toml(),
    "issues": [[i.field, i.message] for i in report.issues],
    "own": [[i.field, i.message] for i in rules_of("glazed").option_issues({**flow, "timestep_sampling": "glaze_shift",
                                                                            "glaze_depth": 0.75})],
    "flux": [[i.field, i.message] for i in rules_of("flux").option_issues({**flow, "timestep_sampling": "glaze_shift",
                                                                           "glaze_depth": 0.75})],
    "presets": presets.names("lora"),
    "preset": presets.load("user: glazed", "lora")[0] if "user: glazed" in presets.names("lora") else None,
    "docs": options_markdown(),
}))
'''


def _plugin_package(root: Path) -> None:
    write_plugin_package(root, "glazed", {"options.py": OPTIONS_PY, "rules.py": RULES_PY})


@pytest.mark.slow  # a Python process of its own: the registry gains the family before the schema is built
def test_a_family_folder_brings_its_options_with_no_other_edits(tmp_path: Path) -> None:
    _plugin_package(tmp_path / "src")
    seen = run_plugin_probe(tmp_path, PROBE, "glazed", 'schema_version = 1\nmethod = "lora"\n\n[model]\n'
                            'model_family = "glazed"\n\n[glazed]\nglaze_depth = 0.25\n')
    # Its own section, after the flow section, in the schema, the page's tab (with the family to choose), the TOML
    # and the docs.
    assert seen["groups"].index("flow") < seen["groups"].index("glazed") < seen["groups"].index("precision")
    assert "glaze_depth" in seen["widgets"] and "glazed" in seen["accordions"]
    assert "glazed" in seen["family_choices"]
    assert "[glazed]\nglaze_depth = 0.75" in seen["toml"] and 'timestep_sampling = "glaze_shift"' in seen["toml"]
    assert "## [glazed] Glazed models" in seen["docs"] and "| `glaze_depth` | `0.5` |" in seen["docs"]
    # Its help says who reads what: its own option, its sampling value, the shared options it reads, its note.
    assert seen["help"]["glaze_depth"] == "Glazed only: how deep the glaze goes."
    assert seen["samplings"][-1] == "glaze_shift"
    assert "Glazed only: 'glaze_shift', uniform then glazed." in seen["help"]["timestep_sampling"]
    assert " and Glazed: how the noise level" in seen["help"]["timestep_sampling"]  # the last family named
    assert seen["help"]["weighting_scheme"].endswith(" Glazed: a glaze draws by it too.")
    # Validate: the schema's check of its option; its own rules take its sampling value, another family's do not.
    assert "glaze_depth" in dict(seen["issues"])
    assert seen["own"] == []
    flux = dict(seen["flux"])
    assert set(flux) == {"timestep_sampling", "glaze_depth"} and "another family's" in flux["timestep_sampling"]
    assert "is not read by FLUX.1 models" in flux["glaze_depth"]
    # A preset of it loads with its option (beside the built-in LoRA presets).
    assert "user: glazed" in seen["presets"] and seen["preset"] == {"model_family": "glazed", "glaze_depth": 0.25}


def test_the_shared_options_help_names_no_family() -> None:
    """Which family reads a shared option is said by the family (its options.py), not by the shared declaration."""
    words = {spec.title for spec in FAMILIES} | {"SD1", "SD2", "SD3", "SDXL", "FLUX", "Kontext", "Chroma", "Qwen",
                                                  "Lumina", "Krea", "Z-Image"}
    pattern = re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))
    named = [(o.name, found.group()) for info in pkgutil.iter_modules(groups.__path__)
             for o in getattr(importlib.import_module(f"{groups.__name__}.{info.name}"), "OPTIONS", ())
             if (found := pattern.search(o.help))]
    assert named == []


def test_each_family_has_one_title() -> None:
    assert {spec.name: spec.title for spec in FAMILIES} == {spec.name: rules_of(spec.name).title for spec in FAMILIES}


def test_a_variant_is_written_without_editing_the_family_it_builds_on() -> None:
    """Qwen-Image 2.1 and Krea 2 build on Qwen-Image's classes (and the edit models on their bases): the family they
    build on names none of them; what differs lives in the variant's folder (hooks it overrides)."""
    from trainers.models.families import all_families

    packages = {spec.name: spec.package for spec in FAMILIES}
    found = {family.name: family for family in all_families()}
    pairs = [(base, variant) for variant in found.values() for base in found.values()
             if packages[base.name] != packages[variant.name] and isinstance(variant, type(base))]
    assert ("qwen_image", "qwen_image21") in {(b.name, v.name) for b, v in pairs}
    assert ("qwen_image", "krea2") in {(b.name, v.name) for b, v in pairs}
    for base, variant in pairs:
        folder = REPO / packages[base.name].replace(".", "/")
        for source in folder.glob("*.py"):
            code = _code_words(source)
            assert not [w for w in code if variant.name in w or variant.title in w], (source, variant.name)


def _code_words(source: Path) -> list[str]:
    """The strings and names of a module's code (its docstrings and comments left out: they may say what a hook
    is for)."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
    return words
