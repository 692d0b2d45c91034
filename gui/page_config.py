"""What the page's config carries to the browser: none of Gradio's API description of each component.

Gradio writes four entries into every component's config for its API docs and clients (`api_info`,
`api_info_as_input`, `api_info_as_output`, `example_inputs`): 0.4 MB of the 2 MB page with its ~2,400 components.
The page's events are undocumented (gui/page.py `keep_api_docs_off`) and its frontend reads none of them, so the
copy each page load and `/config` send leaves them out; the app's own config keeps them (the API info endpoint reads
it). Idempotent.
"""
from __future__ import annotations

from typing import Any

from gradio import route_utils

API_ONLY_KEYS = ("api_info", "api_info_as_input", "api_info_as_output", "example_inputs")
_original = route_utils.update_root_in_config


def _without_api_info(config: Any, root: str) -> Any:
    # `config` is the copy made for this one request (Gradio deep-copies it before this call)
    for component in config.get("components", []):
        for key in API_ONLY_KEYS:
            component.pop(key, None)
    return _original(config, root)


def lighten_page_config() -> None:
    route_utils.update_root_in_config = _without_api_info  # type: ignore[assignment]
