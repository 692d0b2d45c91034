"""Browser tests of what a newcomer and a remote user meet: named reports for bad numbers, presets that stay
listed, imports that change only what they name, a command whose config exists, uploads and downloads.

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/gui/test_gui_page_browser.py
"""
from __future__ import annotations

import json
import shlex
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from browser_app import VIEWPORT, App, expect
from test_gui_browser import _fill, _open, demo_tab, lora  # noqa: F401 - fixtures

pytestmark = pytest.mark.browser


def _import(page, path: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.locator("#import-lora").click()
    chooser.value.set_files(str(path))


def test_bad_numbers_are_named_in_the_report(lora) -> None:  # noqa: F811
    page = lora
    _open(page, "network")
    for option, value in (("learning_rate", "-0.001"), ("train_batch_size", "0"), ("network_alpha", "-5"),
                          ("network_dim", "abc")):
        _fill(page, option, value)
    page.locator("#validate-lora").click()
    report = page.locator("#report-lora")
    expect(report).to_contain_text("problem(s) to fix")
    for option in ("learning_rate", "train_batch_size", "network_alpha", "network_dim"):
        expect(report).to_contain_text(option)
    expect(report).to_contain_text("'abc'")
    expect(report).not_to_contain_text("None")
    for option, value in (("learning_rate", "1e-4"), ("train_batch_size", "2"), ("network_alpha", "4"),
                          ("network_dim", "8")):
        _fill(page, option, value)
    page.locator("#validate-lora").click()
    expect(report).to_contain_text("Ready to start")
    expect(page.locator("#opt-learning_rate")).to_contain_text("learning_rate")  # the option's own name shows


def test_a_saved_preset_keeps_its_name_and_survives_a_reload(lora) -> None:  # noqa: F811
    page = lora
    _open(page, "network")
    _fill(page, "network_dim", "12")
    save_as = page.get_by_label("Save current settings as")
    save_as.fill("my test preset!")
    page.get_by_role("button", name="Save as preset").click()
    report = page.locator("#report-lora")
    expect(report).to_contain_text("Saved preset my test preset (as my test preset:")
    page.reload()
    expect(page.locator("#report-lora")).to_contain_text("Loaded preset demo", timeout=90_000)
    page.locator("#preset-lora input").click()
    expect(page.get_by_role("option", name="my test preset", exact=True)).to_be_visible()
    page.get_by_role("option", name="my test preset", exact=True).click()
    _open(page, "network")
    _fill(page, "network_dim", "4")
    page.locator("#load-preset-lora").click()
    expect(page.locator("#report-lora")).to_contain_text("Loaded preset my test preset")
    expect(page.locator("#opt-network_dim").locator("textarea, input").first).to_have_value("12")


def test_import_changes_only_what_the_file_names_and_show_command_writes_its_config(lora, tmp_path: Path) -> None:  # noqa: F811
    page = lora
    _open(page, "network")
    _fill(page, "network_dim", "8")  # the demo's (the preset test before this one changes it)
    _fill(page, "output_name", "kept_name")
    partial = tmp_path / "only dim.toml"
    partial.write_text('[network]\nnetwork_dim = 24\n', encoding="utf-8")
    _import(page, partial)
    expect(page.locator("#report-lora")).to_contain_text("It decides 1 option(s)")
    expect(page.locator("#report-lora")).to_contain_text("network_dim: 8 → 24")
    expect(page.locator("#opt-network_dim").locator("textarea, input").first).to_have_value("24")
    expect(page.locator("#opt-output_name").locator("textarea, input").first).to_have_value("kept_name")

    page.get_by_role("button", name="Show command").click()
    code = page.locator(".cm-content").filter(has_text="--config").first
    expect(code).to_contain_text("--config")
    argv = shlex.split(code.inner_text().splitlines()[-1])
    config = Path(argv[argv.index("--config") + 1])
    assert config.is_file() and "kept_name" in config.read_text(encoding="utf-8")


def test_a_kohya_ss_json_at_atelier_s_defaults_replaces_the_demo_values(lora, tmp_path: Path) -> None:  # noqa: F811
    page = lora
    for option, value in (("learning_rate", "0.01"), ("train_batch_size", "2"), ("max_train_epochs", "5")):
        _fill(page, option, value)  # the demo's (other tests change them)
    kohya = tmp_path / "kohya.json"
    kohya.write_text(json.dumps({"LoRA_type": "Standard", "learning_rate": 0.0001, "train_batch_size": 1,
                                 "max_train_steps": 300}), encoding="utf-8")
    _import(page, kohya)
    report = page.locator("#report-lora")
    expect(report).to_contain_text("learning_rate: 0.01 → 0.0001")
    expect(report).to_contain_text("max_train_epochs: 5 → (unset)")
    for option, value in (("learning_rate", "0.0001"), ("train_batch_size", "1"), ("max_train_steps", "300"),
                          ("max_train_epochs", "")):
        expect(page.locator(f"#opt-{option}").locator("textarea, input").first).to_have_value(value)


def test_a_kohya_ss_json_imported_on_the_lora_tab_fills_the_dreambooth_tab(lora) -> None:  # noqa: F811
    page = lora
    corpus = Path(__file__).resolve().parents[1] / "adapters" / "kohya_corpus" / "kohya_ss" / "test" / "config"
    _import(page, corpus / "dreambooth-AdamW.json")
    report = page.locator("#report-dreambooth")
    expect(report).to_contain_text("a dreambooth config: it went to this tab")
    expect(page.locator("#start-dreambooth")).to_be_visible()
    shown = page.get_by_role("tabpanel").locator("#opt-output_name").locator("textarea, input").first
    expect(shown).to_have_value("db-AdamW")  # the Dreambooth tab's own field (each tab has its own form)
    page.get_by_role("tab", name="LoRA", exact=True).click()


def test_upload_a_dataset_then_download_a_runs_results(lora, demo_app: App, tmp_path: Path) -> None:  # noqa: F811
    page = lora
    sources = tmp_path / "my pictures"
    sources.mkdir()
    for i in range(3):
        Image.new("RGB", (64, 64), (40 * i, 90, 200)).save(sources / f"{i}.png")
        (sources / f"{i}.txt").write_text(f"a blue square {i}", encoding="utf-8")
    page.locator("#upload-lora").click()
    page.locator("#upload-files-lora input[type=file]").set_input_files(sorted(str(p) for p in sources.iterdir()))
    page.locator("#upload-name-lora textarea, #upload-name-lora input").first.fill("blue squares")
    page.locator("#upload-go-lora").click()
    expect(page.locator("#report-lora")).to_contain_text("Uploaded 3 image(s), 3 caption(s)", timeout=60_000)
    folder = demo_app.runs_dir.parent / "datasets" / "blue squares"
    expect(page.locator("#opt-train_data_dir").locator("textarea, input").first).to_have_value(str(folder))
    assert sorted(p.name for p in (folder / "10_blue squares").iterdir())[:2] == ["0.png", "0.txt"]
    page.locator("#validate-lora").click()
    expect(page.locator("#report-lora")).to_contain_text("Ready to start")

    run = demo_app.runs_dir / "20260101-000000-lora-done"  # a finished run as the trainer leaves it
    out = tmp_path / "out"
    (run / "samples").mkdir(parents=True)
    out.mkdir()
    (out / "done.safetensors").write_bytes(b"the lora")
    Image.new("RGB", (8, 8)).save(run / "samples" / "done_000002.png")
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in (
        {"type": "sample", "path": str(run / "samples" / "done_000002.png"), "prompt": "x", "step": 2, "epoch": 1,
         "index": 0},
        {"type": "done", "output": str(out / "done.safetensors")})), encoding="utf-8")
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora", "created": 2e9,
                                                 "output": str(out / "done.safetensors")}))
    older = demo_app.runs_dir / "20250101-000000-lora-older"
    older.mkdir()
    (older / "status.json").write_text(json.dumps({"state": "stopped", "method": "lora", "created": 1e9}))
    fresh = page.context.browser.new_context(viewport=VIEWPORT).new_page()  # a new browser: it shows the latest run
    try:
        fresh.goto(demo_app.url)
        expect(fresh.locator("#run-title")).to_contain_text(run.name, timeout=60_000)
        fresh.get_by_role("tab", name="Runs", exact=True).click()
        fresh.get_by_role("button", name="Refresh", exact=True).click()
        fresh.locator("#runs-table").get_by_text(older.name).last.click()  # a row click shows that run
        expect(fresh.locator("#run-title")).to_contain_text(older.name)
        fresh.locator("#runs-table").get_by_text(run.name).last.click()
        expect(fresh.locator("#run-title")).to_contain_text(run.name)
        with fresh.expect_download() as got:
            fresh.locator("#download-all").click()
            fresh.locator("#download-file a").first.click()
        archive = tmp_path / "all.zip"
        got.value.save_as(archive)
        with zipfile.ZipFile(archive) as z:
            assert z.read("done.safetensors") == b"the lora" and "samples/done_000002.png" in z.namelist()
        with fresh.expect_download() as got:
            fresh.locator("#download-model").click()
            expect(fresh.locator("#download-file").get_by_role("cell", name="done.safetensors")).to_be_visible()
            fresh.locator("#download-file a").first.click()
        got.value.save_as(tmp_path / "model.safetensors")
        assert (tmp_path / "model.safetensors").read_bytes() == b"the lora"
        # --demo opens the ControlNet tab on its own demo preset too (its widgets are built holding its values)
        fresh.get_by_role("tab", name="ControlNet", exact=True).click(timeout=90_000)  # renders its ~400 fields
        expect(fresh.locator("#report-controlnet")).to_contain_text("Loaded preset demo_controlnet", timeout=60_000)
        panel = fresh.get_by_role("tabpanel")
        expect(panel.locator("#opt-output_name").locator("textarea, input").first).to_have_value("demo_controlnet")
        expect(fresh.locator("#run-title")).to_contain_text(run.name)
    finally:
        fresh.context.close()
