"""The scores of a run's samplings, handed in from above (trainers/scores/hook.py `start_scores`, through
trainers/train/run.py `Checks.scores`): the loop calls the scorer after each sampling and after the final save, on
the main process."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trainers.train.session import Session


class SaveScorer(Protocol):
    def after_samples(self) -> Any: ...

    def finish(self) -> Any: ...


ScoreStart = Callable[["Session"], "SaveScorer | None"]  # made once per run


def scored(sample: Callable[[int, int], None] | None,
           scorer: SaveScorer | None) -> Callable[[int, int], None] | None:
    """`sample`, then the scores of what it rendered (the scorer reports its own problems as warnings)."""
    if sample is None or scorer is None:
        return sample

    def sample_and_score(step: int, epoch: int) -> None:
        sample(step, epoch)
        scorer.after_samples()

    return sample_and_score
