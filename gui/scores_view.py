"""The run panel's scores block: each scored sampling's prompt fidelity and likeness, the best save marked and the
overfitting flag (trainers/scores/, docs/scores.md), from the run's Scores events."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.events import Scores

SCORES_DOC = "[docs/scores.md](manual/docs/scores.md)"
SHOWN = 12  # the newest samplings in the table


def scores_text(scores: list[Scores]) -> str:
    """Markdown: a table of the newest samplings' scores (the best save's row marked), the pick and the flag."""
    if not scores:
        return ""
    newest = scores[-1]
    scores = latest(scores)
    best = Path(newest.best_save).name if newest.best_save else None
    head = f"**Scores** ({SCORES_DOC}): best save " + (f"**`{best}`** (step {newest.best_step})" if best else
                                                      "not picked yet")
    if newest.overfitting_from_epoch is not None:
        head += f" · **overfitting from epoch {newest.overfitting_from_epoch}** (likeness up, fidelity down)"
    rows = ["| step | epoch | fidelity | likeness | save |", "|---|---|---|---|---|"]
    for s in scores[-SHOWN:]:
        save = Path(s.save).name if s.save else ""
        mark = " ★" if newest.best_step is not None and s.step == newest.best_step else ""
        rows.append(f"| {s.step} | {s.epoch} | {_num(s.fidelity)} | {_num(s.likeness)} | {save}{mark} |")
    return head + "\n\n" + "\n".join(rows)


def latest(scores: list[Scores]) -> list[Scores]:
    """One event per step, the newest (the run's end scores its last sampling again, with its final save)."""
    return sorted({s.step: s for s in scores}.values(), key=lambda s: s.step)


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def scores_chart(scores: list[Scores]) -> tuple[Any, Any]:
    """(change key, the scores chart): fidelity and likeness over the run's steps, its title naming the best save."""
    import gradio as gr
    import pandas as pd

    key = (len(scores), scores[-1].best_step if scores else None)
    best = scores[-1].best_step if scores else None
    scores = latest(scores)
    frame = pd.DataFrame([(s.step, s.fidelity, "fidelity") for s in scores if s.fidelity is not None]
                         + [(s.step, s.likeness, "likeness") for s in scores if s.likeness is not None],
                         columns=["step", "score", "series"])
    title = "Scores" + (f" (best save: step {best})" if best is not None else "")
    return key, gr.LinePlot(frame, title=title, visible=bool(scores), x_axis_format="d")
