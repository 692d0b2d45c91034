"""Text fields full of shell metacharacters reach the trainer literally: argv lists and a TOML library only.

The GUI's launcher (JobManager.start) runs a stand-in for Python that records the argv it was given;
the config it points to must load back with every fuzzed value unchanged, and nothing is executed.
"""
from __future__ import annotations

import json
import shlex
import time
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import stand_in_python
from trainers.core.options import TrainConfig, load_config, options_for

SHELLISH = " \t\n\r'\"`$(){}[]<>|&;*?!~#%^=\\,.:/-_éü漢字🙂"
MARKER = Path("/tmp") / f"atelier-fuzz-{uuid.uuid4().hex}"
INJECTIONS = [f"$(touch {MARKER})", f"`touch {MARKER}`", f"; touch {MARKER}", f"\" && touch {MARKER} && \"",
              f"' ; touch {MARKER} ; '", f"\ntouch {MARKER}\n", f"x = 1\n[model]\npretrained = '{MARKER}'"]
TEXT_FIELDS = [o.name for o in options_for("lora") if o.kind == "str" and not o.choices]
LAUNCH_FIELDS = {o.name for o in options_for("lora") if o.group == "launch"}  # argv flags: no NUL (see below)
LIST_FIELDS = [o.name for o in options_for("lora") if o.kind == "list"]

text = st.one_of(st.sampled_from(INJECTIONS), st.text(alphabet=SHELLISH, min_size=1, max_size=40),
                 st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20))
FUZZ = settings(max_examples=30, deadline=None, derandomize=True,  # the same examples on every run
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.fixed_dictionaries({name: text.filter(lambda t: "\0" not in t) if name in LAUNCH_FIELDS else text
                              for name in TEXT_FIELDS}),
       st.fixed_dictionaries({name: st.lists(text, max_size=3) for name in LIST_FIELDS}))
def test_fuzzed_text_fields_reach_the_trainer_literally(tmp_path: Path, texts: dict, lists: dict) -> None:
    from gui.jobs import JobManager

    python = stand_in_python(tmp_path)
    jobs = JobManager(tmp_path / f"runs {uuid.uuid4().hex[:6]} ü", python=str(python))
    cfg = TrainConfig("lora", {**texts, **lists, "max_train_steps": 1})
    run_dir = jobs.start(cfg)

    argv_file = run_dir / "argv.json"
    deadline = time.time() + 60
    while not argv_file.exists() and time.time() < deadline:
        time.sleep(0.02)
    argv = json.loads(argv_file.read_text(encoding="utf-8"))
    expected = jobs.command(cfg, run_dir)
    assert argv == expected[1:]
    with open(run_dir / "command.txt", encoding="utf-8", newline="") as shown:  # keep a '\r' in a value
        assert shlex.split(shown.read()) == expected
    loaded = load_config("lora", run_dir / "config.toml")
    for name, value in {**texts, **lists}.items():
        assert loaded.values[name] == value, name
    assert not MARKER.exists(), "a value was executed by a shell"


def test_a_nul_character_in_a_launch_flag_is_refused_by_name(tmp_path: Path) -> None:
    import pytest

    from gui.jobs import JobError, JobManager

    jobs = JobManager(tmp_path / "runs", python=str(stand_in_python(tmp_path)))
    with pytest.raises(JobError, match="gpu_ids contains a NUL character"):
        jobs.start(TrainConfig("lora", {"gpu_ids": "0\x00,1", "max_train_steps": 1}))
    assert not any((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True
