"""The run panel shows a scored run's scores: a table of its samplings, the best save marked, overfitting flagged."""
from __future__ import annotations

import json
from pathlib import Path

from trainers.core import events as ev


def test_the_run_panel_shows_the_scores_the_best_save_and_overfitting(tmp_path: Path) -> None:
    from gui.run_files import RunWatcher
    from gui.run_panel import result_text

    run = tmp_path / "20260101-lora-a"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora", "created": 1000.0}))
    writer = ev.EventWriter(run)
    rows = [(2, 1, 0.31, 0.40, 2), (4, 2, 0.30, 0.55, 4), (6, 3, 0.25, 0.70, 4)]
    for step, epoch, fidelity, likeness, best in rows:
        writer.emit(ev.Scores(step=step, epoch=epoch, fidelity=fidelity, likeness=likeness,
                              save=str(run / f"a-step{step:08d}.safetensors"),
                              best_save=str(run / f"a-step{best:08d}.safetensors"), best_step=best,
                              overfitting_from_epoch=2 if step == 6 else None))
    text = result_text(RunWatcher(run).refresh())
    assert "**Scores**" in text and "best save **`a-step00000004.safetensors`** (step 4)" in text
    assert "**overfitting from epoch 2**" in text
    assert "| 4 | 2 | 0.300 | 0.550 | a-step00000004.safetensors ★ |" in text
    assert "| 6 | 3 | 0.250 | 0.700 | a-step00000006.safetensors |" in text
    from gui.run_panel import render
    from gui.scores_view import scores_text

    key, chart = render(RunWatcher(run).refresh())[-1]  # the panel's last output: the scores chart
    assert key == (3, 4) and "step 4" in chart.title
    assert [row[1:] for row in chart.value["data"] if row[0] == 4] == [[0.30, "fidelity"], [0.55, "likeness"]]
    assert scores_text([]) == "", "an unscored run shows no scores block"
