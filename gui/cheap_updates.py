"""What an event's outputs cost Gradio per page: nothing for a skipped output, once for a chart every page is sent.

Gradio 6 treats `gr.skip()` as an update with no properties and, like any update, builds a new component for it
(a copy of the output's constructor arguments, a fresh `share_token` from the OS's random source, the upload folder
resolved) and stores it in the session, to send `{"__type__": "update"}` in the end. A chart sent as a component
is turned into its plot data for each page again (the data frame to JSON and back, validated, then every cell
walked for files to move into the cache): 5 ms a chart of 1,000 rows. The run panel's refresh skips most of its
15 outputs on most ticks (a page is sent only what changed since its last tick), and sends the same chart
objects to every page (gui/run_panel.py `render` draws them once for all pages), so with 20 pages these were
most of the GUI's CPU per refresh.

`cheapen_updates` hands Gradio only the outputs that are sent, puts the skips back in place, and prepares a chart
object once: the next page sent the same object gets the component and plot data built for the first, and Gradio's
walk of every value sent for file URLs (add_root_url) leaves the prepared charts out. What each page receives is
the same.
"""
from __future__ import annotations

from copy import copy
from typing import Any

from gradio import processing_utils
from gradio.blocks import Blocks
from gradio.components.native_plot import NativePlot
from gradio_client import utils as client_utils

_SKIP: dict[str, str] = {"__type__": "update"}
_original: Any = Blocks.postprocess_data  # Gradio's own
_PREPARED: dict[int, tuple[NativePlot, Any, Any]] = {}  # output id -> (the chart sent, the component built, the data)
_NO_FILES: set[int] = set()  # id() of the prepared data that holds no file (as _PREPARED holds it: alive)
_add_root_url: Any = processing_utils.add_root_url  # Gradio's own


def _skipped(value: Any) -> bool:
    return isinstance(value, dict) and value == _SKIP  # (a data frame or an array compares element by element)


def _part(block_fn: Any, outputs: list[Any]) -> Any:
    part = copy(block_fn)
    part.outputs = outputs
    return part


async def _one(self: Blocks, block_fn: Any, block: Any, value: Any, state: Any) -> Any:
    """The data sent for one output, a chart built only the first time it is sent."""
    if not isinstance(value, NativePlot) or state is None:
        return (await _original(self, _part(block_fn, [block]), value, state))[0]
    prepared = _PREPARED.get(block._id)
    if prepared is None or prepared[0] is not value:
        data = (await _original(self, _part(block_fn, [block]), value, state))[0]
        if prepared is not None:
            _NO_FILES.discard(id(prepared[2]))
        prepared = _PREPARED[block._id] = (value, state[block._id], data)
        if not _has_files(data):
            _NO_FILES.add(id(data))
    state[block._id] = prepared[1]  # the component Gradio stores for the session, as it built it
    if isinstance(prepared[2], dict) and "value" in prepared[2]:
        state._update_value_in_config(block._id, prepared[2]["value"])
    return prepared[2]


async def _postprocess_cheaply(self: Blocks, block_fn: Any, predictions: Any, state: Any) -> list[Any]:
    outputs = block_fn.outputs
    if (block_fn.batch or len(outputs) < 2 or not isinstance(predictions, (list, tuple))
            or len(predictions) != len(outputs)):  # Gradio's own checks and messages
        return await _original(self, block_fn, predictions, state)
    charts = [i for i, value in enumerate(predictions) if isinstance(value, NativePlot)]
    sent = [i for i, value in enumerate(predictions) if i not in charts and (outputs[i].stateful or not _skipped(value))]
    if not charts and len(sent) == len(outputs):
        return await _original(self, block_fn, predictions, state)
    if len(sent) == 1 and isinstance(predictions[sent[0]], dict):  # Gradio reads a lone dict as {output: value}
        padding = [i for i in range(len(outputs)) if i not in charts and i not in sent]
        if not padding:
            return await _original(self, block_fn, predictions, state)
        sent = sorted(sent + padding[:1])
    result: list[Any] = [dict(_SKIP) for _ in outputs]
    if len(sent) > 1:
        done = await _original(self, _part(block_fn, [outputs[i] for i in sent]), [predictions[i] for i in sent], state)
        for i, value in zip(sent, done):
            result[i] = value
    elif sent:
        result[sent[0]] = await _one(self, block_fn, outputs[sent[0]], predictions[sent[0]], state)
    for i in charts:
        result[i] = await _one(self, block_fn, outputs[i], predictions[i], state)
    return result


def _has_files(data: Any) -> bool:
    found: list[Any] = []

    def note(file: Any) -> Any:
        found.append(file)
        return file

    client_utils.traverse(data, note, client_utils.is_file_obj_with_url)
    return bool(found)


def _root_url_but_prepared(data: Any, root_url: str, previous_root_url: str | None) -> Any:
    """Gradio's add_root_url, which walks every value sent for files to give their URLs the page's root (9 ms for
    two 1,000-row charts, for every page), without walking the prepared charts: they hold no file."""
    if isinstance(data, list) and _NO_FILES and any(id(value) in _NO_FILES for value in data):
        return [value if id(value) in _NO_FILES else _add_root_url(value, root_url, previous_root_url)
                for value in data]
    return _add_root_url(data, root_url, previous_root_url)


def cheapen_updates() -> None:
    """Every event from now on skips its `gr.skip()` outputs without building components for them and prepares a
    chart object once for all pages (idempotent)."""
    Blocks.postprocess_data = _postprocess_cheaply  # type: ignore[method-assign]
    processing_utils.add_root_url = _root_url_but_prepared
