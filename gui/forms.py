"""A method's form, generated from the option schema: one widget per option, grouped.

Nothing here lists fields: names, widgets, help, ranges and grouping all come from
trainers.core.options. Values cross between widgets and configs as {name: value} dicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from gui.folder_browser import browsable_textbox
from gui.option_help import widget_info
from trainers.core.options import GROUPS, Option, options_for
from trainers.core.options.training import open_groups

# What a first-time user fills in first, shown at the top of every tab.
ESSENTIALS = ("pretrained_model_name_or_path", "train_data_dir", "output_dir", "output_name")
OPEN_GROUPS = ("optimizer",)  # shown open below the essentials (and a method's own, see open_groups); the rest not


@dataclass
class Form:
    method: str
    widgets: dict[str, gr.components.Component] = field(default_factory=dict)
    group_notes: dict[str, gr.Markdown] = field(default_factory=dict)  # by place: a group, an essential, "essentials"
    accordions: dict[str, gr.Accordion] = field(default_factory=dict)

    @property
    def components(self) -> list[gr.components.Component]:
        return list(self.widgets.values())

    def values(self, data: dict[gr.components.Component, Any]) -> dict[str, Any]:
        """Widget values (from a gradio dict input) as option values."""
        return {name: from_widget(option_for(self.method, name), data[w]) for name, w in self.widgets.items()}

    def updates(self, values: dict[str, Any]) -> dict[gr.components.Component, Any]:
        """gradio updates that put `values` (name -> value) into the widgets they name."""
        return {self.widgets[n]: to_widget(option_for(self.method, n), v) for n, v in values.items() if n in self.widgets}


NUMBER_KINDS = ("int", "float", "number")
_WORDS = {"lr": "LR", "te": "TE", "te1": "TE1", "te2": "TE2", "ema": "EMA", "snr": "SNR", "vae": "VAE", "gpu": "GPU",
          "ids": "IDs", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "toml": "TOML", "json": "JSON", "cpu": "CPU",
          "sdpa": "SDPA", "n": "N", "unet": "U-Net", "loraplus": "LoRA+", "ip": "IP", "fsdp": "FSDP", "dim": "rank"}


def label(name: str) -> str:
    """A field's label: a title in words, then the option's own name (what kohya users search for)."""
    words = [_WORDS.get(w, w) for w in name.split("_")]
    title = " ".join(words)
    return f"{title[:1].upper()}{title[1:]} · {name}"


def option_for(method: str, name: str) -> Option:
    return next(o for o in options_for(method) if o.name == name)


def to_widget(opt: Option, value: Any) -> Any:
    if opt.kind == "list":
        return "\n".join(value or [])
    if opt.per_encoder and isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if opt.nullable or (opt.kind in NUMBER_KINDS and not opt.choices):  # numbers are typed as text
        return "" if value is None else str(value)
    if value is None and opt.kind == "str":
        return ""
    return value


def from_widget(opt: Option, value: Any) -> Any:
    """Widget value -> option value, before schema validation (which names any problem)."""
    if opt.kind == "list":
        return [line.strip() for line in str(value or "").splitlines() if line.strip()]
    if opt.kind in ("int", "float", "number"):
        if isinstance(value, str):
            if not value.strip():
                return None if opt.nullable else value
            try:
                value = float(value)
            except ValueError:
                return value  # the schema check names the field and what it accepts
        if opt.kind in ("int", "number") and isinstance(value, float) and value.is_integer():
            return int(value)
    return value


_DEFAULT: Any = object()  # make_widget's value when none is given: the option's default


def make_widget(opt: Option, value: Any = _DEFAULT) -> gr.components.Component:
    """`opt`'s widget, holding `value` (an option value; by default the option's default)."""
    shown = to_widget(opt, opt.default if value is _DEFAULT else value)
    common = {"label": label(opt.name), "info": widget_info(opt), "value": shown,
              "elem_id": f"opt-{opt.name}"}
    if opt.kind == "bool":
        return gr.Checkbox(**common)
    if opt.choices:  # with a pattern, values other than the choices may be typed (e.g. an optimizer class path)
        return gr.Dropdown(choices=list(opt.choices), allow_custom_value=opt.pattern is not None, **common)
    if opt.kind in NUMBER_KINDS:
        # Text, not gr.Number: a browser number field turns a typo into "no value" and checks its range in a toast
        # that names no field; as text, the report names the field and the range, like every other problem.
        return gr.Textbox(placeholder="unset" if opt.nullable else opt.allowed(), **common)
    if opt.kind == "list":
        return gr.Textbox(lines=2, placeholder="one per line", **common)
    placeholder = {"dir": "folder path", "file": "file path", "out": "folder path (created if missing)",
                   "any": "folder path or hub id"}.get(opt.path or "", None)
    if opt.path:  # with a Browse button listing the server's folders and model files
        return browsable_textbox(opt.path, placeholder=placeholder, **common)
    return gr.Textbox(placeholder=placeholder, **common)


def build_form(method: str, values: dict[str, Any] | None = None) -> Form:
    """Render the form inside the current gradio context and return its widgets, holding `values` (name -> value)
    where given, else the options' defaults."""
    start = values or {}
    form = Form(method)
    options = options_for(method)
    by_group: dict[str, list[Option]] = {}
    for opt in options:
        if opt.name not in ESSENTIALS:
            by_group.setdefault(opt.group, []).append(opt)
    with gr.Group(elem_classes=["essentials"]):
        gr.Markdown("**Start here:** the base model, your images and where the result goes.")
        for row in (ESSENTIALS[:2], ESSENTIALS[2:]):
            with gr.Row():
                for name in row:
                    with gr.Column(min_width=160):  # its problems directly under it, as a form shows them
                        opt = option_for(method, name)
                        form.widgets[name] = make_widget(opt, start.get(name, opt.default))
                        form.group_notes[name] = gr.Markdown(visible=False, elem_classes=["group-problems"],
                                                             elem_id=f"note-{name}")
    form.group_notes["essentials"] = gr.Markdown(visible=False, elem_classes=["group-problems"])  # names no option
    for group, title in GROUPS.items():
        members = by_group.get(group, [])
        if not members:
            continue
        shown = group in OPEN_GROUPS or group in open_groups(method)
        with gr.Accordion(title, open=shown, elem_id=f"group-{method}-{group}") as accordion:
            form.accordions[group] = accordion
            form.group_notes[group] = gr.Markdown(visible=False, elem_classes=["group-problems"])
            _grid([o for o in members if not o.advanced], form, start)
            advanced = [o for o in members if o.advanced]
            if advanced:
                with gr.Accordion("Advanced", open=False):
                    _grid(advanced, form, start)
    return form


def _grid(options: list[Option], form: Form, values: dict[str, Any], per_row: int = 3) -> None:
    for start in range(0, len(options), per_row):
        with gr.Row():
            for opt in options[start:start + per_row]:
                form.widgets[opt.name] = make_widget(opt, values.get(opt.name, opt.default))
