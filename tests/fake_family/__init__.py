"""A tiny fake model family for the tests whose behaviour does not depend on the model (loop, resume, saves,
faults, multi-process): a few-thousand-parameter denoiser behind the real plug-in interface, loaded in milliseconds.

`build_fake_model(folder)` writes its model folder; `registered()` (in this process) or `FAKE_FAMILY_ENV` (in a
trainer process, through tests/hooks/sitecustomize.py) adds it to the families detection asks."""
from __future__ import annotations

from tests.fake_family.registration import FAKE_FAMILY_ENV, SPEC, add_to, registered  # noqa: F401
