"""Render while paused (trainers/train/live_render.py): a paused run renders the Generate tab's request with its live
weights into live/, answers a bad request or a failed render with the reason and stays paused, and, continued, ends
with the same final weights as an unpaused run. Trainers run in this process (and as two DDP processes), on the tests'
fake model family (tests/fake_family/)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from trainers.core.render_request import RenderRequest, parse_render_request
from trainers.core.rundir import CONTROL, LIVE, RENDER_REQUEST, Request, read_status, request, write_render_request

from helpers import events, fake_family_env, run_trainer, sets, train, two_processes
from paused_runs import WAIT_S, WhilePaused, lora_file, lora_options, wait_for

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3,
        "network_dim": 4, "network_alpha": 2, "max_train_steps": 4, "save_precision": "float"}


@pytest.fixture()
def lora(fake_model_dir: Path, tmp_path: Path) -> dict[str, object]:
    return lora_options(fake_model_dir, tmp_path, FAST)


def _answer(run: Path, request_id: str) -> dict:
    """The live_render event answering `request_id`, once it is there."""
    found: list[dict] = []

    def answered() -> bool:
        try:
            found[:] = [e for e in events(run) if e["type"] == "live_render" and e["request"] == request_id]
        except (OSError, ValueError):
            return False
        return bool(found)

    wait_for(answered, f"the answer to render request {request_id}")
    return found[0]


class Asker(WhilePaused):
    """Pause pressed before the run starts (it pauses after step 1); once paused: a good render request, two bad
    ones (written by hand, as a script might), one at multiplier 0 and one whose render fails, each awaited; then
    Continue."""

    def __init__(self, run: Path) -> None:
        super().__init__(run)
        self.answers: dict[str, dict] = {}
        self.states: list[str] = []

    def while_paused(self) -> None:
        write_render_request(self.run_dir, RenderRequest(id="good", prompt="sks shape, a red cross", seed=7,
                                                         steps=3, width=64, height=72, cfg_scale=4.0))
        self.answers["good"] = _answer(self.run_dir, "good")
        bad = {"id": "bad", "prompt": "sks shape", "width": 100, "heigth": 64}
        (self.run_dir / CONTROL / RENDER_REQUEST).write_text(json.dumps(bad), encoding="utf-8")
        self.answers["bad"] = _answer(self.run_dir, "bad")
        bad.pop("heigth")
        bad["id"] = "bad size"
        (self.run_dir / CONTROL / RENDER_REQUEST).write_text(json.dumps(bad), encoding="utf-8")
        self.answers["bad size"] = _answer(self.run_dir, "bad size")
        self.states.append(str(read_status(self.run_dir).get("state")))
        write_render_request(self.run_dir, RenderRequest(id="off", prompt="sks shape, a red cross", seed=7, steps=3,
                                                         width=64, height=72, cfg_scale=4.0, multiplier=0.0))
        self.answers["off"] = _answer(self.run_dir, "off")
        write_render_request(self.run_dir, RenderRequest(id="boom", prompt="explode"))
        self.answers["boom"] = _answer(self.run_dir, "boom")
        self.states.append(str(read_status(self.run_dir).get("state")))
        request(self.run_dir, Request.CONTINUE)


@pytest.mark.slow
def test_a_paused_run_renders_with_its_live_weights_and_ends_as_an_unpaused_one(lora: dict, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from trainers.sampling import pipeline

    real = pipeline.generate_samples

    def failing(model: object, prompts: list, *args: object, **kwargs: object) -> list:
        if prompts[0].prompt == "explode":
            raise RuntimeError("out of memory (planted)")
        return real(model, prompts, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "generate_samples", failing)
    assert train("lora", tmp_path / "straight", **lora, output_name="straight") == 0
    run = tmp_path / "paused"
    asker = Asker(run)
    asker.start()
    assert train("lora", run, **lora, output_name="paused") == 0
    asker.join(WAIT_S)
    assert asker.error is None, asker.error

    good = asker.answers["good"]
    assert good.get("error") is None, good
    assert good["step"] == 1 and good["prompt"] == "sks shape, a red cross" and good["seed"] == 7
    image = Path(good["path"])
    assert image.parent == run / LIVE and image.name == "step000001-001.png"
    with Image.open(image) as png:
        assert png.size == (64, 72)
        parameters = png.info["parameters"]
    assert "sks shape, a red cross" in parameters and "Seed: 7" in parameters and "Steps: 3" in parameters

    assert "'heigth'" in asker.answers["bad"]["error"] and "'height'" in asker.answers["bad"]["error"]
    assert "width 100 must be a multiple of 8 (e.g. 96 or 104)" in asker.answers["bad size"]["error"]
    assert asker.states == ["paused", "paused"], "a bad request leaves the run paused"
    assert asker.answers["boom"]["error"] == "the render failed: RuntimeError: out of memory (planted)"
    off = asker.answers["off"]
    assert off.get("error") is None and off["multiplier"] == 0.0 and Path(off["path"]) != image

    out = tmp_path / "out"
    a, b = lora_file(out / "straight.safetensors"), lora_file(out / "paused.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the renders changed the training"
    status = read_status(run)
    assert status["state"] == "finished" and status["activity"] == ""
    assert [e["step"] for e in events(run) if e["type"] == "progress"] == list(range(1, 5))


def test_a_render_request_is_checked_and_round_trips() -> None:
    wanted = RenderRequest(id="r1", prompt="a cat", negative="blurry", seed=3, steps=20, width=512, height=768,
                           cfg_scale=7.0, multiplier=0.5)
    assert parse_render_request(json.loads(json.dumps(wanted.to_json()))) == wanted
    assert parse_render_request({"id": "x", "prompt": "a cat"}) == RenderRequest(id="x", prompt="a cat")
    assert "unknown key 'sed'" in (reason := str(parse_render_request({"prompt": "a", "sed": 1})))
    assert "did you mean 'seed'" in reason
    assert "prompt is empty" in str(parse_render_request({"prompt": " "}))
    assert "height 4100 must be between 64 and 4096" in str(parse_render_request({"prompt": "a", "height": 4100}))
    assert "multiplier" in str(parse_render_request({"prompt": "a", "multiplier": float("nan")}))
    assert "steps" in str(parse_render_request({"prompt": "a", "steps": 2.5}))
    assert "JSON object" in str(parse_render_request(["a"]))


def test_a_render_request_is_written_atomically_and_taken_once(tmp_path: Path) -> None:
    from trainers.core.rundir import take_render_request

    assert take_render_request(tmp_path) is None
    write_render_request(tmp_path, RenderRequest(id="a", prompt="first"))
    write_render_request(tmp_path, RenderRequest(id="b", prompt="second"))  # not taken yet: replaced
    assert take_render_request(tmp_path) == {"id": "b", "prompt": "second", "negative": "", "multiplier": 1.0}
    assert take_render_request(tmp_path) is None
    assert [p.name for p in (tmp_path / CONTROL).iterdir()] == []
    (tmp_path / CONTROL / RENDER_REQUEST).write_text("{not json", encoding="utf-8")
    assert "not JSON" in str(take_render_request(tmp_path))


@pytest.mark.slow
def test_two_processes_render_once_and_train_on(lora: dict, tmp_path: Path) -> None:
    """DDP over gloo: the request rank 0 reads reaches every rank, the main process renders, the other waits."""
    run = tmp_path / "two"
    answers: list[dict] = []

    def ask() -> None:
        write_render_request(run, RenderRequest(id="both", prompt="sks shape", seed=1, steps=2))
        answers.append(_answer(run, "both"))
        request(run, Request.CONTINUE)

    asker = WhilePaused(run, ask, stop_on_error=True)
    asker.start()
    result = run_trainer(sets(**lora, num_processes=2), run, two_processes(),
                         env=fake_family_env(ACCELERATE_USE_CPU="1"))
    asker.join(WAIT_S)
    assert asker.error is None, asker.error
    assert result.returncode == 0, result.stderr[-3000:]
    assert answers[0].get("error") is None, answers[0]
    assert [p.name for p in (run / LIVE).iterdir()] == [Path(answers[0]["path"]).name]
    assert read_status(run)["state"] == "finished"
    assert [e["request"] for e in events(run) if e["type"] == "live_render"] == ["both"], "answered once"


@pytest.mark.slow
def test_a_paused_tiny_sd1_run_renders_what_its_next_sample_shows(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """The demo's kind of model (a tiny SD1.x, a LoRA with conv layers): the live render at step 1 is the image the
    step-1 sample makes with the same settings (the live weights, not a save's), at multiplier 0 the base model's
    (the step-0 sample), and the run ends with the weights of an unpaused one."""
    common = lora_options(tiny_sd1_dir, tmp_path, {
        **FAST, "max_train_steps": 2, "network_dim": 8, "network_alpha": 8.0, "conv_dim": 8, "conv_alpha": 8.0,
        "learning_rate": 0.01, "sample_prompt_lines": ["sks shape, grey cross --s 2 --d 1"],
        "sample_every_n_steps": 1, "sample_at_first": True})
    assert train("lora", tmp_path / "straight", **common, output_name="straight") == 0
    run = tmp_path / "paused"
    answers: dict[str, dict] = {}

    def ask() -> None:
        for name, multiplier in (("live", 1.0), ("base", 0.0)):
            write_render_request(run, RenderRequest(id=name, prompt="sks shape, grey cross", seed=1, steps=2,
                                                    multiplier=multiplier))
            answers[name] = _answer(run, name)
        request(run, Request.CONTINUE)

    asker = WhilePaused(run, ask, stop_on_error=True)
    asker.start()
    assert train("lora", run, **common, output_name="paused") == 0
    asker.join(WAIT_S)
    assert asker.error is None, asker.error
    samples = {e["step"]: e["path"] for e in events(run) if e["type"] == "sample"}

    def pixels(path: str) -> bytes:
        with Image.open(path) as image:
            return image.tobytes()

    assert pixels(answers["live"]["path"]) == pixels(samples[1]), "rendered with the weights of step 1"
    assert pixels(answers["base"]["path"]) == pixels(samples[0]), "multiplier 0: the base model"
    assert pixels(samples[1]) != pixels(samples[0]), "the first step changed the image (else the test sees nothing)"
    out = tmp_path / "out"
    a, b = lora_file(out / "straight.safetensors"), lora_file(out / "paused.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
