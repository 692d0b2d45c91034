"""Import config, on every method tab: our TOML, an sd-scripts --config_file TOML or a kohya_ss JSON.

The file goes to the tab of the method it is for (which is shown). Exactly the options the file decides change,
whatever their value (trainers.adapters.kohya.page_import), and the report lists each change as old -> new.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import gradio as gr

from gui.forms import Form, from_widget, option_for, to_widget
from gui.text import plain
from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.core.options import ConfigError

SHOWN_CHARS = 48  # of a value in the list of changes


class ImportingTab(Protocol):
    """What a method tab of the page (gui.page.MethodTab) offers an import."""

    form: Form
    report: gr.Markdown
    import_button: gr.UploadButton


@dataclass
class Imported:
    """What an import does to the page: the tab it fills (None when refused), the values it sets, its report."""

    method: str | None
    values: dict[str, Any] = field(default_factory=dict)
    report: str = ""


def import_config(path: Path, here: str, shown: dict[str, dict[str, Any]], runs_dir: Path | None) -> Imported:
    """Import `path` from the `here` tab; `shown`: each method's widget values as the page holds them now."""
    try:
        method, values, notes = import_kohya_file(path, runs_dir)
    except ConfigError as err:
        return Imported(None, report=f"### Import failed: `{path.name}`\n{plain(err)}")
    before = shown.get(method, {})
    changes = [line for name, widget_value in before.items() if name in values
               if (line := _change(method, name, widget_value, values[name]))]
    moved = "" if method == here else f" (a {method} config: it went to this tab)"
    lines = [f"### Imported `{path.name}`{moved}",
             f"It decides {len(values)} option(s): **{len(changes)} changed**, the others already had the file's "
             "value. Fields the file does not name are unchanged."]
    if changes:
        lines += ["", "**Changed**", *changes]
    if notes:
        lines += ["", "**Notes**", *(f"- {plain(note)}" for note in notes)]
    return Imported(method, values, "\n".join(lines))


def _change(method: str, name: str, widget_value: Any, value: Any) -> str:
    """`- name: old → new` when the import changes what the field shows, else ''."""
    opt = option_for(method, name)
    old, new = to_widget(opt, from_widget(opt, widget_value)), to_widget(opt, value)
    return "" if old == new else f"- `{name}`: {_shown(old)} → {_shown(new)}"


def _shown(value: Any) -> str:
    if value is None or value == "":
        return "(unset)"
    text = str(value).replace("\n", "; ").replace("`", "'")  # inside a code span
    return f"`{text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + '...'}`"


def wire_imports(method_tabs: dict[str, ImportingTab], tabs: gr.Tabs, runs_dir: Path) -> None:
    """Every tab's Import button: the file fills the tab of its method, which is shown."""
    widgets = [c for t in method_tabs.values() for c in t.form.components]
    outputs = {tabs} | {t.report for t in method_tabs.values()} | set(widgets)

    def on_import(here: str, data: dict) -> dict:
        file = data[method_tabs[here].import_button]
        path = Path(file if isinstance(file, str) else file.name)
        shown = {name: {opt: data[w] for opt, w in tab.form.widgets.items()} for name, tab in method_tabs.items()}
        done = import_config(path, here, shown, runs_dir)
        if done.method is None:
            return {method_tabs[here].report: done.report}
        target = method_tabs[done.method]
        return {**target.form.updates(done.values), target.report: done.report, tabs: gr.Tabs(selected=done.method)}

    for name, tab in method_tabs.items():
        tab.import_button.upload(lambda data, here=name: on_import(here, data), inputs={tab.import_button, *widgets},
                                 outputs=outputs)
