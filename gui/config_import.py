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


@dataclass  # not frozen, so unhashable: gradio then tells States apart by object, and each import is a change
class ReadFile:
    """A config file read for a tab: the method it is for, the values it decides, the reader's notes."""

    name: str
    here: str  # the tab it was imported on
    method: str
    values: dict[str, Any]
    notes: list[str]


def read_config(path: Path, here: str, runs_dir: Path | None) -> ReadFile | Imported:
    """`path` read as imported on the `here` tab, or the refusal (an Imported without a method)."""
    try:
        method, values, notes = import_kohya_file(path, runs_dir)
    except ConfigError as err:
        return Imported(None, report=f"### Import failed: `{path.name}`\n{plain(err)}")
    return ReadFile(path.name, here, method, values, notes)


def applied(read: ReadFile, before: dict[str, Any]) -> Imported:
    """What `read` does to its method's tab, whose widgets show `before` (option -> widget value)."""
    method, values = read.method, read.values
    changes = [line for name, widget_value in before.items() if name in values
               if (line := _change(method, name, widget_value, values[name]))]
    moved = "" if method == read.here else f" (a {method} config: it went to this tab)"
    lines = [f"### Imported `{read.name}`{moved}",
             f"It decides {len(values)} option(s): **{len(changes)} changed**, the others already had the file's "
             "value. Fields the file does not name are unchanged."]
    if changes:
        lines += ["", "**Changed**", *changes]
    if read.notes:
        lines += ["", "**Notes**", *(f"- {plain(note)}" for note in read.notes)]
    return Imported(method, values, "\n".join(lines))


def import_config(path: Path, here: str, shown: dict[str, dict[str, Any]], runs_dir: Path | None) -> Imported:
    """Import `path` from the `here` tab; `shown`: each method's widget values as the page holds them now."""
    read = read_config(path, here, runs_dir)
    return read if isinstance(read, Imported) else applied(read, shown.get(read.method, {}))


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
    """Every tab's Import button: the file fills the tab of its method, which is shown.

    Two events, so that an import sends and updates one tab's fields, not every tab's (over a thousand widgets
    made an import take 20-50 s in the browser): the upload reads the file and hands it to its method's tab through
    that tab's mailbox (a State); the mailbox's change applies it to that tab's fields and writes its report."""
    mailboxes = {name: gr.State(None) for name in method_tabs}

    def on_upload(here: str, file: Any) -> dict:
        read = read_config(Path(file if isinstance(file, str) else file.name), here, runs_dir)
        if isinstance(read, Imported):
            return {method_tabs[here].report: read.report}
        return {mailboxes[read.method]: read, tabs: gr.Tabs(selected=read.method)}

    upload_outputs = [tabs, *(t.report for t in method_tabs.values()), *mailboxes.values()]
    for name, tab in method_tabs.items():
        tab.import_button.upload(lambda file, here=name: on_upload(here, file), inputs=tab.import_button,
                                 outputs=upload_outputs)

        def on_mail(data: dict, tab: ImportingTab = tab, mailbox: gr.State = mailboxes[name]) -> dict:
            # a mailbox only ever changes to a new ReadFile (it starts empty, and change does not fire for that)
            done = applied(data[mailbox], {opt: data[w] for opt, w in tab.form.widgets.items()})
            return {**tab.form.updates(done.values), tab.report: done.report}

        mailboxes[name].change(on_mail, inputs={mailboxes[name], *tab.form.components},
                               outputs=[*tab.form.components, tab.report])
