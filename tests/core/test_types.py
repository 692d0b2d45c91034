"""mypy (pinned in requirements-dev.txt, configured in mypy.ini) finds no error in trainers/core, trainers/train and
trainers/models/checks.py."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a cold cache (CI's clean checkout) takes about 30 s on a busy 2-core machine; a warm one seconds
def test_mypy_passes_over_core_and_train() -> None:
    cache = Path(tempfile.gettempdir()) / "atelier-mypy-cache"
    out, err, status = api.run(["--config-file", str(REPO / "mypy.ini"), "--cache-dir", str(cache),
                                str(REPO / "trainers" / "core"), str(REPO / "trainers" / "train"),
                                str(REPO / "trainers" / "models" / "checks.py")])
    assert status == 0, out + err
