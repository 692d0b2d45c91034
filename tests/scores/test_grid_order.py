"""The compare grid's save rows ordered by a run's scores (compare_order), labelled with them, the best marked."""
from __future__ import annotations

from pathlib import Path

from trainers.generate.grid import by_score


def test_rows_sort_by_score_highest_first_and_unscored_rows_last(tmp_path: Path) -> None:
    files = {name: str(tmp_path / f"{name}.safetensors") for name in ("epoch 1", "epoch 2", "epoch 3", "final")}
    scores = {"records": [{"save": files["epoch 1"], "likeness": 0.2, "fidelity": 0.30},
                          {"save": files["epoch 2"], "likeness": 0.6, "fidelity": 0.28},
                          {"save": files["final"], "likeness": 0.4, "fidelity": 0.31}],
              "best": {"save": files["final"]}}
    rows = list(files)
    cells = [[f"{r}.png"] for r in rows]
    ordered, moved = by_score(rows, cells, files, scores, "likeness")
    assert ordered == ["epoch 2  L 0.600  F 0.280", "final  L 0.400  F 0.310  (best)", "epoch 1  L 0.200  F 0.300",
                       "epoch 3"]
    assert moved == [["epoch 2.png"], ["final.png"], ["epoch 1.png"], ["epoch 3.png"]], "cells move with rows"
    assert [r.split("  ")[0] for r in by_score(rows, cells, files, scores, "fidelity")[0]] == \
        ["final", "epoch 1", "epoch 2", "epoch 3"]
    assert by_score(rows, cells, files, {}, "likeness") == (rows, cells), "a run without scores keeps its order"
