"""`python -m trainers tools <verb>` as a job: bad options named before anything loads, the job folder's events,
status and report, a stop, the docs' option tables; and the page telling tool jobs from generation jobs."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from lora_samples import digest, sample_modules, write

from trainers.__main__ import main
from trainers.core.rundir import read_status
from trainers.tools.options import options_markdown

REPO = Path(__file__).resolve().parents[2]


def _events(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()]


def test_bad_options_are_named_with_the_fix_and_nothing_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    job = tmp_path / "job"
    code = main(["tools", "resize", "--lora", str(tmp_path / "missing.safetensors"), "--dynamic-method", "sv_fro",
                 "--run-dir", str(job)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"lora: {tmp_path / 'missing.safetensors'} does not exist; check the path" in err
    assert "dynamic_param: dynamic_method sv_fro needs dynamic_param" in err
    assert read_status(job)["state"] == "failed" and not list(job.glob("*.safetensors"))
    assert main(["tools", "merge", "--lora", "a.safetensors:x1", "--run-dir", str(tmp_path / "j2")]) == 2
    assert "loras: " in capsys.readouterr().err
    assert main(["tools", "resize", "--set", "new_rnk=4", "--run-dir", str(tmp_path / "j3")]) == 2
    assert "did you mean 'new_rank'?" in capsys.readouterr().err


def test_a_job_folder_holds_its_events_status_report_and_output(tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", sample_modules())
    before = digest(source)
    job = tmp_path / "job"
    assert main(["tools", "resize", "--lora", str(source), "--new-rank", "2", "--device", "cpu", "--run-dir",
                 str(job)]) == 0
    kinds = [e["type"] for e in _events(job)]
    assert kinds[0] == "tool_start" and kinds[-1] == "done" and "tool_progress" in kinds and "tool_report" in kinds
    outputs = [e["path"] for e in _events(job) if e["type"] == "tool_output"]
    assert outputs == [str(job / "in-r2.safetensors"), str(job / "report.md"), str(job / "report.json")]
    status = read_status(job)
    assert (status["state"], status["method"], status["verb"]) == ("finished", "tools", "resize")
    assert status["output"] == str(job / "in-r2.safetensors") and digest(source) == before
    # the job's config.toml runs it again (into another folder: outputs are never overwritten)
    assert main(["tools", "resize", "--config", str(job / "config.toml"), "--run-dir", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "in-r2.safetensors").exists()
    assert main(["tools", "merge", "--config", str(job / "config.toml"), "--run-dir", str(tmp_path / "j4")]) == 2


def test_a_stopped_job_leaves_no_output(tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", sample_modules())
    job = tmp_path / "job"
    (job / "control").mkdir(parents=True)
    (job / "control" / "stop").touch()  # as the page's Stop asks
    assert main(["tools", "resize", "--lora", str(source), "--new-rank", "2", "--device", "cpu", "--run-dir",
                 str(job)]) == 0
    assert read_status(job)["state"] == "stopped" and not list(job.glob("*.safetensors"))


def test_docs_list_every_tools_option() -> None:
    assert options_markdown() in (REPO / "docs" / "tools.md").read_text(encoding="utf-8"), \
        "docs/tools.md is out of date: paste the output of trainers.tools.options.options_markdown()"


def test_the_generate_tab_leaves_tool_jobs_to_the_tools_tab(tmp_path: Path) -> None:
    from gui import generate_tab, tools_tab

    for name, method, age in (("tools-x", "tools", 0), ("generate-y", "generate", 60)):  # the tool job is newer
        (tmp_path / name).mkdir()
        (tmp_path / name / "status.json").write_text(json.dumps(
            {"state": "running", "method": method, "pgid": os.getpid(), "launcher_pid": os.getpid(),
             "trainer_pid": os.getpid(), "created": time.time() - age}))
    assert generate_tab.ACTIVE.find(tmp_path) == "generate-y"
    assert tools_tab.ACTIVE.find(tmp_path) == "tools-x"
