"""What one page load costs: the page as the browser downloads it, and the title line it opens with.

The page is served in this process as app.py serves it (without a login) and fetched over HTTP once.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from helpers import free_port

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
httpx = pytest.importorskip("httpx")

PAGE_LIMIT = 2_000_000  # bytes of the page (HTML with its config); it was 6.9 MB, 5 MB of it API docs


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object]]:
    from gui.jobs import JobManager
    from gui.page import Services, build_page
    from gui.presets import Presets
    from gui.run_files import Watchers

    base = tmp_path_factory.mktemp("weight")
    runs = base / "runs"
    runs.mkdir()
    page = build_page(Services(runs, JobManager(runs), Presets(base / "presets"), Watchers(), [base]))
    page.queue()
    port = free_port()
    page.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, footer_links=[])
    try:
        yield f"http://127.0.0.1:{port}", page
    finally:
        page.close()


def test_the_page_a_browser_downloads_stays_under_2_mb(served) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=60) as client:
        page = client.get("/")
    assert page.status_code == 200
    assert len(page.content) < PAGE_LIMIT, f"the page is {len(page.content) / 1e6:.2f} MB"
    assert "code_snippets" not in page.text  # no API docs in it


def test_the_page_events_stay_callable_without_their_api_docs(served) -> None:
    url, page = served
    with httpx.Client(base_url=url, timeout=60) as client:
        info = client.get("/gradio_api/info").json()
    assert info["named_endpoints"] == {}
    assert all(fn.api_visibility != "private" or fn.fn is None for fn in page.fns.values())


def test_the_title_line_names_every_registered_method_and_family(served) -> None:
    from trainers.core.registry import FAMILIES, METHODS
    from trainers.models.rules import rules_of

    _, page = served
    title = next(c for c in page.get_config_file()["components"] if c["props"].get("elem_id") == "page-title")
    text = title["props"]["value"]
    missing = [f.name for f in FAMILIES if rules_of(f.name).title not in text]
    missing += [m.name for m in METHODS if m.title not in text]
    assert not missing, f"the title line leaves out {missing}: {text}"
