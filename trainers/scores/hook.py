"""What a run is handed to score its saves (trainers/__main__.py puts `start_scores` in the run's Checks): made once
per run on the main process, called after each sampling and after the final save. Torch-free until it scores."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainers.core.options.typed import SamplingOptions
from trainers.core.prompts import config_prompts
from trainers.scores.run import RunScorer, ScoreSettings

if TYPE_CHECKING:
    from trainers.train.session import Session


def start_scores(session: "Session") -> RunScorer | None:
    """The run's scorer when score_saves is on (and it has sample prompts and a run folder), else None."""
    cfg = session.cfg
    if not cfg.values.get("score_saves") or session.run_dir is None:
        return None
    sampling = SamplingOptions.of(cfg)
    if not config_prompts(sampling.sample_prompts, list(sampling.sample_prompt_lines)):
        session.events.warn("score_saves is on but the run renders no samples (sample_prompts is empty): "
                            "no save is scored")
        return None
    return RunScorer(session.run_dir, ScoreSettings.of(cfg.values), training_images(session),
                     session.events.warn, session.events.emit, session.accelerator.device)


def training_images(session: "Session") -> list[Path]:
    """The images the run trains on (regularization images left out): what likeness compares samples with."""
    catalog = session.catalog
    return [image.path for image in catalog.images if not catalog.subsets[image.subset].is_reg]
