"""How often each open page refreshes its run panel: every second, unless so many pages are open (a `--share`
link passed around) that their refreshes together would take the trainer's CPU.

A refresh cost the GUI 10-30 ms of CPU in Gradio (its queue, event stream and output handling), whatever the run
panel showed; 20 pages refreshing every second took a fifth of a core from a training run on a 2-core machine. It
is 5-9 ms now (outside the queue, skipped outputs and shared charts cheap: gui/cheap_updates.py), and still paid
per refresh, so the budget stays.
All open pages together refresh at most PAGE_REFRESHES_PER_S times a second: with up to that many pages each one
refreshes every second, with more each one less often (20 pages: every 4 s). The page's timer takes the interval
its refresh answers with.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

PAGE_REFRESHES_PER_S = 5.0  # the run panel refreshes of all open pages together, at most
SEEN_FOR_S = 10.0  # a page that refreshed this recently is open (a closed tab stops counting after it)
FASTEST_S = 1.0


class RefreshBudget:
    """The refresh interval for each page, from the number of pages open now (those that refreshed recently)."""

    def __init__(self, per_s: float = PAGE_REFRESHES_PER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s, self._clock = per_s, clock
        self._seen: dict[str, float] = {}  # page (Gradio session) -> when it last refreshed
        self._lock = threading.Lock()

    def interval(self, page: str) -> float:
        """Seconds until `page`'s next refresh, in half-second steps (the interval does not change with every
        page that opens or closes by a few)."""
        now = self._clock()
        with self._lock:
            self._seen[page] = now
            for gone in [p for p, seen in self._seen.items() if now - seen > SEEN_FOR_S]:
                del self._seen[gone]
            pages = len(self._seen)
        return max(FASTEST_S, math.ceil(2 * pages / self.per_s) / 2)
