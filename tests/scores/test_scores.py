"""Scores per save with tiny random encoders: the arithmetic against an independent computation, the pick rules,
the overfitting flag, the metadata keys in a saved file, scores.json and the Scores event, and the missing model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file

from trainers.core.events import Checkpoint, EventWriter, Sample, Scores, Validation, read_events
from trainers.core.rundir import SCORES
from trainers.scores.metadata import add_metadata
from trainers.scores.pick import overfitting_epoch, pick_best
from trainers.scores.run import RunScorer, ScoreSettings

PROMPTS = ["sks shape", "a red circle"]


def _image(path: Path, seed: int) -> Path:
    generator = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(40, 48, 3, generator=generator) * 255).to(torch.uint8).numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path


def _planted_run(tmp_path: Path, steps: tuple[int, ...] = (2, 4)) -> tuple[Path, list[Path], dict[int, Path]]:
    """A run folder whose events name two samplings of two prompts each, and a LoRA saved at each step."""
    run = tmp_path / "run"
    writer = EventWriter(run)
    training = [_image(tmp_path / "data" / f"{i}.png", 100 + i) for i in range(3)]
    saves = {}
    for step in steps:
        save = tmp_path / "out" / f"l-step{step:08d}.safetensors"
        save.parent.mkdir(parents=True, exist_ok=True)
        save_file({"lora_unet_x.lora_down.weight": torch.randn(4, 8)}, str(save), metadata={"ss_network_dim": "4"})
        saves[step] = save
        writer.emit(Checkpoint(path=str(save), epoch=step // 2, step=step))
        for index, prompt in enumerate(PROMPTS):
            path = _image(run / "samples" / f"l_{step:06d}_{index:02d}.png", step * 10 + index)
            writer.emit(Sample(path=str(path), prompt=prompt, step=step, epoch=step // 2, index=index))
    writer.emit(Validation(step=steps[0], epoch=1, loss=0.25))
    return run, training, saves


def _independent_clip(folder: Path, images: list[Path], texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """CLIP's projected image and text embeddings, computed from the towers directly (no trainers code)."""
    from transformers import CLIPImageProcessor, CLIPModel, CLIPTokenizer

    model = CLIPModel.from_pretrained(str(folder)).eval()
    pixels = CLIPImageProcessor.from_pretrained(str(folder))(images=[Image.open(p).convert("RGB") for p in images],
                                                             return_tensors="pt")["pixel_values"]
    tokens = CLIPTokenizer.from_pretrained(str(folder))(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        image = model.visual_projection(model.vision_model(pixel_values=pixels).pooler_output)
        text = model.text_projection(model.text_model(**tokens).pooler_output)
    return image, text


def _independent_dino(folder: Path, images: list[Path]) -> torch.Tensor:
    from transformers import BitImageProcessor, Dinov2Model

    model = Dinov2Model.from_pretrained(str(folder)).eval()
    pixels = BitImageProcessor.from_pretrained(str(folder))(images=[Image.open(p).convert("RGB") for p in images],
                                                            return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        return model(pixel_values=pixels).last_hidden_state[:, 0]  # the class token after the final layernorm


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a[:, None, :], b[None, :, :], dim=-1)


def test_scores_equal_an_independent_computation(tmp_path: Path, tiny_clip_dir: Path, tiny_dino_dir: Path) -> None:
    run, training, saves = _planted_run(tmp_path)
    warnings: list[str] = []
    emitted: list[object] = []
    scorer = RunScorer(run, ScoreSettings(str(tiny_clip_dir), str(tiny_dino_dir)), training, warnings.append,
                       emitted.append)
    records = scorer.after_samples()
    assert warnings == [] and [r["step"] for r in records] == [2, 4]
    train_dino = _independent_dino(tiny_dino_dir, training)
    for record in records:
        samples = [Path(p) for p in record["images"]]
        image, text = _independent_clip(tiny_clip_dir, samples, PROMPTS)
        fidelity = torch.diagonal(_cos(image, text)).mean()
        likeness = _cos(_independent_dino(tiny_dino_dir, samples), train_dino).mean()  # mean of all pairs
        assert record["fidelity"] == pytest.approx(float(fidelity), abs=1e-5)
        assert record["likeness"] == pytest.approx(float(likeness), abs=1e-5)
        assert record["save"] == str(saves[record["step"]])
    assert records[0]["validation_loss"] == 0.25 and records[1]["validation_loss"] is None
    assert list((run / "score_cache").glob("training-*.safetensors")), "the training embeddings are kept"
    report = json.loads((run / SCORES).read_text(encoding="utf-8"))
    best = pick_best(records)
    assert report["best"]["step"] == best["step"] and len(report["records"]) == 2
    assert [type(e) for e in emitted] == [Scores, Scores] and emitted[-1].best_save == best["save"]
    with safe_open(str(saves[4]), framework="pt") as handle:
        metadata = handle.metadata()
        assert handle.get_tensor("lora_unet_x.lora_down.weight").shape == (4, 8)
    assert metadata["ss_network_dim"] == "4", "sd-scripts' keys are kept"
    assert float(metadata["atelier_score_fidelity"]) == pytest.approx(records[1]["fidelity"], abs=1e-5)
    assert float(metadata["atelier_score_likeness"]) == pytest.approx(records[1]["likeness"], abs=1e-5)
    assert metadata["atelier_best_save"] == Path(best["save"]).name
    assert scorer.after_samples() == [], "a sampling is scored once"


def test_clip_alone_scores_likeness_with_its_image_tower(tmp_path: Path, tiny_clip_dir: Path) -> None:
    run, training, _ = _planted_run(tmp_path, steps=(2,))
    record = RunScorer(run, ScoreSettings(str(tiny_clip_dir)), training, print).after_samples()[0]
    samples = [Path(p) for p in record["images"]]
    image, _ = _independent_clip(tiny_clip_dir, samples, PROMPTS)
    train, _ = _independent_clip(tiny_clip_dir, training, PROMPTS[:1])
    assert record["likeness"] == pytest.approx(float(_cos(image, train).mean()), abs=1e-5)


def _records(*rows: tuple[float, float]) -> list[dict[str, object]]:
    return [{"step": 10 * (i + 1), "epoch": i + 1, "save": f"s{i + 1}", "fidelity": f, "likeness": k,
             "validation_loss": 1.0 / (i + 1)} for i, (f, k) in enumerate(rows)]


def test_the_pick_rules_on_planted_records() -> None:
    rows = _records((0.30, 0.50), (0.31, 0.60), (0.20, 0.90), (0.305, 0.70))
    assert pick_best(rows)["save"] == "s4", "the highest likeness among fidelities within 5% of the best"
    assert pick_best(rows, margin_percent=50)["save"] == "s3"
    assert pick_best(rows, "likeness")["save"] == "s3"
    assert pick_best(rows, "fidelity")["save"] == "s2"
    assert pick_best(rows, "validation_loss")["save"] == "s4"
    unsaved = [dict(r, save=None) if r["save"] == "s4" else r for r in rows]
    assert pick_best(unsaved)["save"] == "s2", "a sampling without a save is not picked"
    assert pick_best([]) is None
    with pytest.raises(ValueError, match="best_save_rule"):
        pick_best(rows, "loss")


def test_overfitting_is_flagged_after_two_saves_of_likeness_up_and_fidelity_down() -> None:
    assert overfitting_epoch(_records((0.3, 0.5), (0.31, 0.6), (0.29, 0.7), (0.28, 0.8))) == 3
    assert overfitting_epoch(_records((0.3, 0.5), (0.29, 0.6), (0.30, 0.7), (0.29, 0.8))) is None, "not running"
    assert overfitting_epoch(_records((0.3, 0.5), (0.31, 0.6), (0.32, 0.7))) is None


def test_metadata_is_added_without_touching_the_weights(tmp_path: Path) -> None:
    path = tmp_path / "l.safetensors"
    tensors = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int64)}
    save_file(tensors, str(path), metadata={"ss_x": "1"})
    assert add_metadata(path, {"atelier_score_fidelity": "0.5"})
    assert not add_metadata(path, {"atelier_score_fidelity": "0.5"}), "nothing to change"
    with safe_open(str(path), framework="pt") as handle:
        assert handle.metadata() == {"ss_x": "1", "atelier_score_fidelity": "0.5"}
        assert all(torch.equal(handle.get_tensor(k), v) for k, v in tensors.items())


def test_a_missing_model_offline_is_a_named_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty cache"))
    run, training, _ = _planted_run(tmp_path, steps=(2,))
    warnings: list[str] = []
    scorer = RunScorer(run, ScoreSettings("nobody/absent-score-model"), training, warnings.append)
    assert scorer.after_samples() == [] and scorer.finish() is None
    assert len(warnings) == 1 and "'nobody/absent-score-model' is not downloaded" in warnings[0]
    assert "score_model" in warnings[0]
    assert not [e for e in read_events(run) if isinstance(e, Scores)]


def test_scores_is_a_training_event() -> None:
    from trainers.core.events import TRAINING_EVENTS

    assert TRAINING_EVENTS["scores"] is Scores
