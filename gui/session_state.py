"""Lighter per-session bookkeeping in Gradio: what each open page costs the server, whatever the page shows.

Gradio 6 keeps, for every browser session, a config copy of every component (`SessionState.config_values`) for
one use: its deep-link button, which this page has not. It builds the copy for all ~2,400 components at the
session's first event (0.9 s of CPU on a busy 2-core machine: twenty pages opening at once queued 18 s behind it)
and again for every component an event updates (each tick of each page's run panel). `LightSessionState` builds
it only when a deep link asks for it, from the session's components and the values its events set, so nothing a
page does changes.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from copy import copy
from typing import Any

from gradio import route_utils, state_holder
from gradio.components import State

_Base = state_holder.SessionState


class LightSessionState(_Base):
    def __init__(self, blocks: Any) -> None:  # as SessionState's, without building config_values
        self.blocks_config = copy(blocks.default_config)
        self._live_ids = set(blocks.blocks)
        self._configs: dict[int, dict] | None = None
        self._values: dict[int, Any] = {}  # component id -> the value this session's events last set
        self.state_data: dict[int, Any] = {}
        self._state_ttl: dict[int, tuple[Any, Any]] = {}
        self.is_closed = False
        self.STATE_TTL_WHEN_CLOSED = 1 if os.getenv("GRADIO_IS_E2E_TEST", None) else 3600

    @property
    def config_values(self) -> dict[int, dict]:
        """Every component's config as this session holds it (built on the first ask, then kept up to date)."""
        if self._configs is None:
            blocks = self.blocks_config.blocks
            self._configs = {k: self.blocks_config.config_for_block(k, [], v) for k, v in list(blocks.items())
                             if k in self._live_ids}
            for key, value in self._values.items():
                if "props" in self._configs.get(key, {}):
                    self._configs[key]["props"]["value"] = value
            self._values.clear()
        return self._configs

    @config_values.setter
    def config_values(self, configs: dict[int, dict]) -> None:
        self._configs = configs

    def __setitem__(self, key: int, value: Any) -> None:
        block = self.blocks_config.blocks.get(key)
        if isinstance(block, State):
            self._state_ttl[key] = (block.time_to_live, state_holder.datetime.datetime.now())
            self.state_data[key] = value
        else:
            self.blocks_config.blocks[key] = value
        if block and self._configs is not None:
            self._configs[key] = self.blocks_config.config_for_block(key, [], block)

    def _update_config(self, key: int) -> None:
        if self._configs is not None:
            super()._update_config(key)

    def _update_value_in_config(self, key: int, value: Any) -> None:
        if self._configs is None:
            self._values[key] = value
        else:
            super()._update_value_in_config(key, value)

    @property
    def components(self) -> Iterator[dict]:
        return (config for config in self.config_values.values() if config)


def lighten_sessions() -> None:
    """Every Gradio session from now on keeps the light bookkeeping (idempotent)."""
    state_holder.SessionState = LightSessionState
    route_utils.SessionState = LightSessionState
