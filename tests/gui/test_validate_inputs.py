"""Validate (gui/checks.py check_form) on every kind of input the schema accepts, and on several problems at once.

The inputs are generated from the option schema: every list-valued, per-encoder and nullable option, typed into
its widget as a user would (empty, typical values, one per text encoder, a typo), on top of a config that is
ready to start. Each must give a report, never an exception: ready with its step count, or problems that each
name a field (a typo names its option).
"""
from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gui.checks import check_form
from gui.forms import from_widget, option_for, to_widget
from trainers.core.options import Option, options_for
from trainers.demo import build_dataset

METHODS = ("lora", "dreambooth", "finetune")


def _typed(opt: Option) -> list[str]:
    """What a user may type into the option's widget: empty, values the schema accepts, and a typo."""
    if opt.kind == "list":
        return ["", "1\n2", "key=value\nother"]
    typed = ["", "abc"]
    if opt.per_encoder:
        typed += ["1e-5", "1e-5, 2e-5", "3e-5,3e-5"]
    if opt.kind in ("int", "float", "number"):
        typed += [str(bound) for bound in (opt.min, opt.max) if bound is not None] + ["1"]
    return typed


def _cases(method: str) -> list[tuple[str, str]]:
    options = [o for o in options_for(method) if o.kind == "list" or o.per_encoder or o.nullable]
    return [(o.name, text) for o in options for text in _typed(o)]


@pytest.fixture(scope="module")
def ready(tmp_path_factory: pytest.TempPathFactory, tiny_sd1_dir: Path) -> dict:
    tmp = tmp_path_factory.mktemp("validate")
    data = build_dataset(tmp / "data", folder="3_sks shape")
    return {"pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data),
            "output_dir": str(tmp / "out"), "max_train_epochs": 2, "resolution": "64", "train_batch_size": 2}


@pytest.mark.parametrize("method", METHODS)
def test_every_list_per_encoder_and_unset_option_validates_and_is_named(method: str, ready: dict) -> None:
    assert check_form(method, ready).ok, check_form(method, ready).summary()
    failures = []
    for name, text in _cases(method):
        try:
            report = check_form(method, {**ready, name: from_widget(option_for(method, name), text)})
            summary = report.summary()
        except Exception as err:  # noqa: BLE001 - every failure is listed at once
            failures.append(f"{name} = {text!r}: {type(err).__name__}: {err}")
            continue
        unnamed = [i for i in report.issues if not i.field or len(i.message) < 10]
        if not report.ok and (unnamed or not report.issues and not report.dataset_problem):
            failures.append(f"{name} = {text!r}: a problem without a field or a message: {summary}")
        if text == "abc" and (report.ok or name not in summary):
            failures.append(f"{name} = {text!r}: a typo not named: {summary}")
        if report.ok and not report.steps:
            failures.append(f"{name} = {text!r}: ready, but no step count")
    assert not failures, "\n".join(failures)


def test_two_text_encoder_rates_are_drawn_as_two_series(ready: dict) -> None:
    text = "1e-5, 2e-5"
    report = check_form("lora", {**ready, "text_encoder_lr": from_widget(option_for("lora", "text_encoder_lr"), text)})
    assert set(report.lr_curve) == {"learning_rate", "text_encoder_lr (TE1)", "text_encoder_lr (TE2)"}
    assert report.lr_curve["text_encoder_lr (TE2)"][-1][1] <= 2e-5


def test_one_validate_names_every_problem_in_every_group(ready: dict, tmp_path: Path) -> None:
    """Typos and values out of range, a missing dataset folder, a VAE that is not one and a method's rule: all in the
    first report (a typo used to hide the rest until it was fixed)."""
    bad = {"learning_rate": "fast", "network_dim": 0, "train_data_dir": str(tmp_path / "no such folder"),
           "vae": ready["train_data_dir"], "network_train_unet_only": True, "network_train_text_encoder_only": True}
    report = check_form("lora", {**ready, **bad})
    assert not report.ok and {i.field for i in report.issues} == set(bad) - {"network_train_unet_only"}
    grouped = report.by_group()
    assert {"optimizer", "network", "train_data_dir", "model"} <= set(grouped)
    assert "no such folder" in report.summary() and "'fast'" in report.summary()
    assert not report.steps and not report.lr_curve  # numbers of a config with a typo in it would mislead


def test_a_typo_and_an_empty_dataset_folder_are_named_together(ready: dict, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    report = check_form("lora", {**ready, "train_batch_size": "two", "train_data_dir": str(tmp_path / "empty")})
    assert [i.field for i in report.issues] == ["train_batch_size"]
    assert "this folder is empty" in report.dataset_problem


def test_a_data_folder_without_images_is_named_at_its_field_too(ready: dict, tmp_path: Path) -> None:
    """train_data_dir sits at the top of the form: a folder it names that holds no image subfolders is named there,
    not only in the Dataset group far below (which says how to lay it out)."""
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "notes.txt").write_text("not an image", encoding="utf-8")
    grouped = check_form("lora", {**ready, "train_data_dir": str(tmp_path / "loose")}).by_group()
    at_field = grouped.get("train_data_dir", [])
    assert at_field and "no image subfolders found" in at_field[0] and "Dataset group" in at_field[0]
    assert "Fix:" in grouped["dataset"][0]  # the whole message stays in the Dataset group


def _lora_tab_validate(tmp_path: Path) -> Callable[[dict], dict[str, str]]:
    """The LoRA tab's Validate, as the page wires it: option values in, the notes under the top fields that it shows
    out (by note id)."""
    import gradio as gr

    from gui.jobs import JobManager
    from gui.page import Services, _method_tab
    from gui.presets import Presets
    from gui.run_files import Watchers

    (tmp_path / "runs").mkdir()
    services = Services(tmp_path / "runs", JobManager(tmp_path / "runs"), Presets(tmp_path / "presets"), Watchers())
    with gr.Blocks() as page:
        form = _method_tab("lora", services, gr.BrowserState(""), None, page).form
    on_validate = next(f.fn for f in page.fns.values() if f.name == "on_validate")
    field_notes = [note for note in form.group_notes.values() if note.elem_id]
    assert sorted(note.elem_id for note in field_notes) == ["note-output_dir", "note-output_name",
                                                            "note-pretrained_model_name_or_path", "note-train_data_dir"]

    def validate(values: dict) -> dict[str, str]:
        options = {o.name: o for o in options_for("lora")}
        updates = on_validate({w: to_widget(options[n], values.get(n, options[n].default))
                               for n, w in form.widgets.items()})
        return {note.elem_id: str(updates[note].value) for note in field_notes if updates[note].visible}
    return validate


def test_a_missing_model_and_data_folder_are_named_at_their_own_fields(ready: dict, tmp_path: Path) -> None:
    """Each field at the top gets its own note right under it (as the other problems get their group's): a missing
    model folder is named under the model field and a missing data folder under train_data_dir, not only in the
    summary; a valid form leaves every such note empty and hidden."""
    validate = _lora_tab_validate(tmp_path)
    model, data = tmp_path / "no model here", tmp_path / "no images here"
    notes = validate({**ready, "pretrained_model_name_or_path": str(model), "train_data_dir": str(data)})
    assert set(notes) == {"note-pretrained_model_name_or_path", "note-train_data_dir"}, notes
    assert str(model) in notes["note-pretrained_model_name_or_path"] and str(data) in notes["note-train_data_dir"]
    assert str(data) not in notes["note-pretrained_model_name_or_path"]
    assert str(model) not in notes["note-train_data_dir"]
    assert validate(ready) == {}


def _rendered_text(markdown: str) -> str:
    """What a reader sees of `markdown`: rendered (CommonMark, as gradio's Markdown), tags dropped, entities read."""
    from markdown_it import MarkdownIt

    rendered = re.sub(r"<br\s*/?>", " ", MarkdownIt("commonmark").render(markdown))
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", rendered)).split())


@pytest.mark.parametrize("method", METHODS)
def test_every_options_help_keeps_no_mark_of_gradios_info_rules(method: str) -> None:
    """Gradio renders a widget's info with rules of its own (code, links, **, __, *, _ pairs) and reads no escapes:
    the help must hold none of their marks but the link to its whole text, and read the same (look-alikes aside):
    its first sentence, the rest one click away. The browser test sees it shown."""
    import gradio as gr

    from gui.forms import build_form
    from gui.option_help import help_body, short_help

    with gr.Blocks():
        form = build_form(method)
    marks = re.compile(r"[*`]|\]\(|(?<!\w)_|_(?!\w)", re.ASCII)
    back = str.maketrans({"\u2217": "*", "\u02cb": "`", "\uff3f": "_", "\u200b": None})
    more = re.compile(r" \[more\]\(manual/option/([\w-]+)\)$")
    wrong = []
    for name, widget in form.widgets.items():
        help_text = option_for(method, name).help
        link = more.search(widget.info)
        shown = widget.info[:link.start()] if link else widget.info
        whole = help_body(link.group(1)) if link else None
        if marks.search(shown) or shown.translate(back) != (short_help(help_text) if link else help_text) or (
                link and (whole is None or html.escape(help_text) not in whole[1])):
            wrong.append(name)
    assert not wrong, wrong
    assert form.widgets["optimizer_type"].info.startswith("Optimizer, as in sd-scripts (any case)")
    assert "Paged* ones page their state" in help_body("optimizer_type")[1]


def test_messages_read_in_full_once_rendered(ready: dict) -> None:
    report = check_form("lora", {**ready, "train_data_dir": "", "optimizer_type": "my_module.Adam*"})
    required = next(i for i in report.issues if i.field == "train_data_dir")
    assert "<repeats>_<tokens>" in required.message
    shown = " ".join(_rendered_text(line) for lines in report.by_group().values() for line in lines)
    assert f"train_data_dir: {required.message}" in shown
    summary = _rendered_text(report.summary())
    assert all(" ".join(str(issue).split()) in summary for issue in report.issues), summary
