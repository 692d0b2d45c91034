"""Compare grids: a run's saves (rows) against prompts (columns), labelled, saved next to the run."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import toml
from PIL import Image

from trainers.generate.grid import read_grid_layout
from trainers.generate.saves import compare_form_values, find_saves, is_lora_file

from test_generate import FAST, events, make_lora, pixels, run_main

pytestmark = pytest.mark.slow

SAMPLE_PROMPTS = ["a red fox --n blurry", "a blue bird, flying --d 5"]


@pytest.fixture(scope="module")
def training_run(tiny_sd1_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished LoRA run as the trainer leaves it: config.toml, 3 checkpoint events and their files."""
    base = tmp_path_factory.mktemp("compare run é")
    run, out = base / "runs" / "20260101-lora-fox", base / "out put"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(toml.dumps({
        "method": "lora", "model": {"pretrained_model_name_or_path": str(tiny_sd1_dir)},
        "sampling": {"sample_prompt_lines": SAMPLE_PROMPTS, "sample_sampler": "euler"},
        "saving": {"output_dir": str(out), "output_name": "fox"}, "dataset": {"resolution": "64,96"}}),
        encoding="utf-8")
    lines = []
    for epoch in (1, 2, 3):
        name = f"fox-{epoch:06d}.safetensors" if epoch < 3 else "fox.safetensors"
        make_lora(tiny_sd1_dir, out / name, seed=epoch)
        lines.append(json.dumps({"type": "checkpoint", "path": str(out / name), "epoch": epoch, "step": 4 * epoch,
                                 "final": epoch == 3}))
    (run / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora"}), encoding="utf-8")
    return run


def test_saves_and_form_values_come_from_the_run(training_run: Path, tiny_sd1_dir: Path) -> None:
    saves = find_saves(training_run)
    assert [s.label for s in saves] == ["epoch 1", "epoch 2", "final"]
    assert all(is_lora_file(Path(s.path)) for s in saves)
    values = compare_form_values(training_run)
    assert values["model"] == str(tiny_sd1_dir) and values["prompts"] == SAMPLE_PROMPTS
    assert values["compare_run"] == str(training_run) and values["mode"] == "compare" and values["sampler"] == "euler"
    assert (values["width"], values["height"]) == (64, 96)  # the size the run trained at, not the model's 512
    assert values["loras"] == []  # a LoRA left in the form by an earlier Generate is not stacked on every row
    (training_run / "events.jsonl").rename(training_run / "events.bak")  # no events: the output files
    try:
        assert [s.label for s in find_saves(training_run)] == ["000001", "000002", "final"]
    finally:
        (training_run / "events.bak").rename(training_run / "events.jsonl")


def test_grid_has_a_row_per_save_and_a_column_per_prompt(training_run: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    args = ["--compare-run", str(training_run), "--seed", "42", "--run-dir", str(job)]  # the run's model and prompts
    for name, value in FAST.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    assert run_main(args, command="compare") == 0
    evs = events(job)
    grid_event = next(e for e in evs if e["type"] == "grid")
    assert grid_event["rows"] == ["epoch 1", "epoch 2", "final"]
    assert grid_event["columns"] == ["a red fox\nseed 42", "a blue bird, flying\nseed 5"]  # the second line's --d 5
    copy = Path(grid_event["copy"])
    assert copy.parent == training_run / "compare" and copy.name.startswith("grid-")
    assert evs[-1]["type"] == "done" and evs[-1]["output"] == str(copy)
    layout = read_grid_layout(copy)
    assert layout["rows"] == grid_event["rows"] and layout["columns"] == grid_event["columns"]
    assert layout["seed"] == 42 and layout["cell_size"] == [64, 64]
    with Image.open(copy) as im:
        grid = np.asarray(im.convert("RGB"))
    height = grid.shape[0]
    top = height - 3 * 64
    left = next(x for x in range(grid.shape[1]) if (grid[top:top + 64, x] != 255).all(axis=-1).sum() > 48)
    assert left > 20 and top > 10  # room for the row and column labels
    assert (grid[top:, :left] < 128).any() and (grid[:top, left:] < 128).any()  # the labels are drawn
    cells = [[grid[top + r * 64: top + (r + 1) * 64, left + c * 64: left + (c + 1) * 64] for c in range(2)]
             for r in range(3)]
    for r, row in enumerate(layout["cells"]):  # each cell is its image, where the layout says
        for c, path in enumerate(row):
            np.testing.assert_array_equal(cells[r][c], pixels(path))
    assert not np.array_equal(cells[0][0], cells[1][0])  # the saves differ
    seeds = {(e["label"], e["prompt"]): e["seed"] for e in evs if e["type"] == "image"}
    assert set(seeds.values()) == {42, 5}  # one fixed seed per column (the line's --d wins)


def test_a_scored_runs_rows_sort_by_likeness(training_run: Path, tmp_path: Path) -> None:
    saves = find_saves(training_run)
    records = [{"save": s.path, "step": s.step, "epoch": s.epoch, "likeness": like, "fidelity": 0.3}
               for s, like in zip(saves, (0.1, 0.5, 0.3))]
    (training_run / "scores.json").write_text(json.dumps({"records": records, "best": records[1]}), encoding="utf-8")
    job = tmp_path / "job"
    args = ["--compare-run", str(training_run), "--compare-order", "likeness", "--run-dir", str(job)]
    for name, value in FAST.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    assert compare_form_values(training_run)["compare_order"] == "likeness", "Compare saves sorts a scored run"
    try:
        assert run_main(args, command="compare") == 0
    finally:
        (training_run / "scores.json").unlink()
    rows = next(e for e in events(job) if e["type"] == "grid")["rows"]
    assert rows == ["epoch 2  L 0.500  F 0.300  (best)", "final  L 0.300  F 0.300", "epoch 1  L 0.100  F 0.300"]


def test_a_weight_axis_adds_columns_and_weight_zero_is_the_base(training_run: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    args = ["--compare-run", str(training_run), "--prompt", SAMPLE_PROMPTS[0] + " --s 3", "--weight", "0", "--weight", "1",
            "--run-dir", str(job), "--model", str(compare_form_values(training_run)["model"]), "--num-workers", "1"]
    for name, value in FAST.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    assert run_main(args, command="compare") == 0
    layout = read_grid_layout(job / "grid.png")
    assert layout["rows"] == ["epoch 1", "epoch 2", "final"]
    assert layout["columns"] == ["a red fox\nweight 0", "a red fox\nweight 1"]
    assert "· 3 steps" in layout["title"]  # the steps the images used (the prompt's --s), not the steps option
    zero = [pixels(row[0]) for row in layout["cells"]]
    one = [pixels(row[1]) for row in layout["cells"]]
    for other in zero[1:]:
        np.testing.assert_array_equal(other, zero[0])  # every save at weight 0 is the base model
    assert not np.array_equal(one[0], zero[0]) and not np.array_equal(one[0], one[1])


def test_compare_saves_button_prefills_the_compare_form(training_run: Path) -> None:
    """The run panel offers "Compare saves" for a finished training run; it fills the form from the run."""
    from types import SimpleNamespace

    import gradio as gr

    from gui.generate_tab import build_generate_tab
    from gui.run_files import RunView
    from gui.run_panel import can_compare

    finished = RunView("r", state="finished", status={"method": "lora"}, checkpoints=["/x/fox.safetensors"])
    assert can_compare(finished)
    assert not can_compare(RunView("r", state="running", status={"method": "lora"}, checkpoints=["/x"]))
    assert not can_compare(RunView("r", state="finished", status={"method": "compare"}, output="/x/grid.png"))
    with gr.Blocks():
        tab = build_generate_tab(SimpleNamespace(runs_dir=training_run.parent, jobs=None, allowed_roots=None))
    updates = tab.prefill(training_run)
    assert updates[tab.widgets["prompts"]] == "\n".join(SAMPLE_PROMPTS)
    assert updates[tab.widgets["model"]] == compare_form_values(training_run)["model"]
    assert updates[tab.widgets["compare_run"]].value == str(training_run)
    assert updates[tab.widgets["loras"]] == "" and updates[tab.widgets["width"]] == "64"
    assert "3 saves: epoch 1, epoch 2, final" in updates[tab.status]
