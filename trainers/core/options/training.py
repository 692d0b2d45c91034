"""Every training option, declared once (in trainers/core/options/groups/, one module per group).

Names follow kohya sd-scripts where one exists.
"""
from __future__ import annotations

from trainers.core.options.groups import (
    dataset,
    flow,
    full_weights,
    launch,
    logging,
    loss,
    model,
    network,
    optimizer,
    precision,
    sampling,
    saving,
)
from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (model.OPTIONS + dataset.OPTIONS + network.OPTIONS + full_weights.OPTIONS + optimizer.OPTIONS
                               + loss.OPTIONS + flow.OPTIONS + precision.OPTIONS + sampling.OPTIONS + saving.OPTIONS
                               + logging.OPTIONS + launch.OPTIONS)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "option names must be unique"


def options_for(method: str) -> list[Option]:
    return [o.for_method(method) for o in OPTIONS if method in o.methods]
