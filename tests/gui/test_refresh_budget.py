"""How often each open page refreshes its run panel (gui/refresh_budget.py)."""
from __future__ import annotations

from gui.refresh_budget import SEEN_FOR_S, RefreshBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_few_pages_refresh_every_second_and_many_share_the_budget() -> None:
    clock = Clock()
    budget = RefreshBudget(per_s=5.0, clock=clock)
    assert [budget.interval(f"page-{n}") for n in range(5)] == [1.0] * 5
    assert budget.interval("page-5") == 1.5  # six pages: 6 / 5 s, in half-second steps
    for n in range(6, 20):
        budget.interval(f"page-{n}")
    assert budget.interval("page-0") == 4.0  # twenty pages at 5 refreshes a second together


def test_a_closed_page_stops_counting() -> None:
    clock = Clock()
    budget = RefreshBudget(per_s=5.0, clock=clock)
    for n in range(20):
        budget.interval(f"page-{n}")
    clock.now += SEEN_FOR_S + 1  # nineteen tabs closed: only page-0 still refreshes
    assert budget.interval("page-0") == 1.0
