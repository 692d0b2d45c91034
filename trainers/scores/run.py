"""A run's scores: every sampling's images scored, written to <run>/scores.json, announced as a Scores event, and
put into the saves' metadata; the best save picked by best_save_rule and overfitting flagged (pick.py).

What it scores comes from the run's events (its Sample, Checkpoint and Validation records), so a live run (the hook
after each sampling, trainers/scores/hook.py) and `python -m trainers scores <run>` (a finished run) do the same.
The models load when the first sampling is scored; the training images' embeddings are computed once per run and
score model and kept in <run>/score_cache/. Torch is imported only then.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.events import TRAINING_EVENTS, Checkpoint, Event, EventReader, Sample, Scores, Validation
from trainers.core.fsio import atomic_write_text
from trainers.core.rundir import SCORE_CACHE, SCORES, read_scores
from trainers.scores.metadata import add_metadata, score_metadata
from trainers.scores.pick import overfitting_epoch, pick_best

LIKENESS_METHOD = "mean pairwise cosine similarity of each sample image with every training image"
_SAVE_KINDS = ("step", "epoch", "stop", "final")  # the method's outputs (not training states)
_IMAGES = (".png", ".jpg", ".jpeg", ".webp")  # a video family's sample clips are not scored


@dataclass(frozen=True)
class ScoreSettings:
    score_model: str = "openai/clip-vit-large-patch14"
    likeness_model: str = ""  # empty: score_model
    rule: str = "likeness_keep_fidelity"
    margin_percent: float = 5.0

    @classmethod
    def of(cls, values: dict[str, Any]) -> "ScoreSettings":
        return cls(str(values.get("score_model") or cls.score_model), str(values.get("likeness_model") or ""),
                   str(values.get("best_save_rule") or cls.rule),
                   float(values.get("best_save_fidelity_margin", cls.margin_percent)))


class RunScorer:
    """Scores a run's samplings as they come; `warn` reports a problem (no model: scores are off, said once)."""

    def __init__(self, run_dir: Path, settings: ScoreSettings, training_images: Sequence[Path],
                 warn: Callable[[str], None], emit: Callable[[Event], None] | None = None,
                 device: Any = "cpu") -> None:
        self.run_dir, self.settings, self.device = Path(run_dir), settings, device
        self.training_images = sorted(Path(p) for p in training_images)
        self.warn, self.emit = warn, emit
        self.reader = EventReader(self.run_dir, TRAINING_EVENTS)
        self.samples: dict[int, list[Sample]] = {}
        self.saves: dict[int, str] = {}
        self.losses: dict[int, float] = {}
        self.records: dict[int, dict[str, Any]] = {r["step"]: r for r in read_scores(self.run_dir).get("records", [])}
        self.off: str | None = None  # why scores are off for this run
        self.final: tuple[int, str] | None = None  # (step, path) of the final save
        self._encoders: tuple[Any, Any] | None = None
        self._training_mean: Any = None

    # --- what the run (or the command) calls ---

    def after_samples(self) -> list[dict[str, Any]]:
        """Score every sampling not scored yet; write scores.json, the events and the metadata. The new records.
        A scoring that fails is a warning with its reason and turns scores off, never a failed run."""
        if self.off:
            return []
        try:
            return self._after_samples()
        except Exception as err:  # noqa: BLE001 - scores must not end a run
            self.off = f"scoring failed: {type(err).__name__}: {err}"
            self.warn(f"score_saves: {self.off}; no further save is scored")
            return []

    def _after_samples(self) -> list[dict[str, Any]]:
        self._read_events()
        new = []
        for step in sorted(self.samples):
            if step in self.records or self.off:
                continue
            record = self._score(step)
            if record is None:  # no model (scores are off now), or no images at that step (clips, or deleted)
                continue
            self.records[step] = record
            new.append(record)
        self._update()
        if new:
            self._write(new)
        return new

    def finish(self) -> dict[str, Any] | None:
        """After the final save: its step's scores (when it sampled there), the pick into the best and the final
        saves' metadata. The best record, or None; a failure is a warning, never a failed run."""
        self.after_samples()
        if not self.records or self.off:
            return None
        try:
            return self._finish()
        except Exception as err:  # noqa: BLE001 - the run's saves are written; scores must not fail it
            self.off = f"scoring failed: {type(err).__name__}: {err}"
            self.warn(f"score_saves: {self.off}")
            return None

    def _finish(self) -> dict[str, Any] | None:
        best = self._best()
        keys = score_metadata(None, best, self.settings.rule, overfitting_epoch(self._list()))
        if best is not None and best.get("save"):
            add_metadata(Path(best["save"]), {**score_metadata(best, None, "", None), **keys})
        own = self.records.get(self.final[0]) if self.final is not None else None
        if self.final is not None:
            add_metadata(Path(self.final[1]), {**score_metadata(own, None, "", None), **keys})
        self._write([own] if own is not None else [])  # the last sampling again, now with its (final) save
        return best

    # --- the work ---

    def _read_events(self) -> None:
        for event in self.reader.read_new():
            if isinstance(event, Sample):
                self.samples.setdefault(event.step, []).append(event)
            elif isinstance(event, Checkpoint) and event.kind in _SAVE_KINDS:
                self.saves[event.step] = event.path
                if event.final:
                    self.final = (event.step, event.path)
            elif isinstance(event, Validation):
                self.losses[event.step] = event.loss

    def _update(self) -> None:
        """Saves and validation losses that came after their step's scoring (a step saves before it samples; the
        final save and validation come after)."""
        for step, record in self.records.items():
            if step in self.saves:
                record["save"] = self.saves[step]
            if step in self.losses:
                record["validation_loss"] = self.losses[step]

    def _score(self, step: int) -> dict[str, Any] | None:
        from trainers.scores.embed import ModelMissing, fidelity, likeness

        try:
            text_model, image_model = self._models()
            training = self._training()
        except ModelMissing as err:
            self.off = str(err)
            self.warn(f"score_saves: {err}")
            return None
        samples = sorted(self.samples[step], key=lambda s: s.index)
        present = [s for s in samples if Path(s.path).is_file() and Path(s.path).suffix.lower() in _IMAGES]
        if not present:
            return None
        paths = [Path(s.path) for s in present]
        images = text_model.images(paths)
        texts = text_model.texts([s.prompt for s in present])
        like = image_model.images(paths) if image_model is not text_model else images
        return {"step": step, "epoch": present[0].epoch, "save": self.saves.get(step),
                "fidelity": fidelity(images, texts),
                "likeness": likeness(like, training) if training is not None else None,
                "validation_loss": self.losses.get(step), "images": [str(p) for p in paths]}

    def _models(self) -> tuple[Any, Any]:
        if self._encoders is None:
            from trainers.scores.embed import load_embedder

            text_model = load_embedder(self.settings.score_model, self.device)
            other = self.settings.likeness_model
            image_model = load_embedder(other, self.device, with_text=False) \
                if other and other != self.settings.score_model else text_model
            self._encoders = (text_model, image_model)
        return self._encoders

    def _training(self) -> Any:
        """The mean of the training images' unit embeddings (cached in the run folder), or None without images."""
        if self._training_mean is not None or not self.training_images:
            return self._training_mean
        import torch
        from safetensors.torch import load_file, save_file

        model = self._models()[1]
        key = hashlib.sha1(json.dumps([model.name] + [f"{p}:{p.stat().st_mtime_ns}" if p.exists() else str(p)
                                                      for p in self.training_images]).encode()).hexdigest()[:16]
        cache = self.run_dir / SCORE_CACHE / f"training-{key}.safetensors"
        if cache.is_file():
            self._training_mean = load_file(str(cache))["mean"]
        else:
            embeddings = model.images([p for p in self.training_images if p.is_file()])
            self._training_mean = embeddings.mean(dim=0)
            cache.parent.mkdir(parents=True, exist_ok=True)
            save_file({"mean": self._training_mean.contiguous(), "all": embeddings.contiguous()}, str(cache),
                      metadata={"model": model.name, "images": str(len(embeddings))})
        return self._training_mean.to(torch.float32)

    def _list(self) -> list[dict[str, Any]]:
        return [self.records[s] for s in sorted(self.records)]

    def _best(self) -> dict[str, Any] | None:
        return pick_best(self._list(), self.settings.rule, self.settings.margin_percent)

    def _write(self, new: list[dict[str, Any]]) -> None:
        records, best = self._list(), self._best()
        overfit = overfitting_epoch(records)
        report = self.run_dir / SCORES
        atomic_write_text(report, json.dumps({
            "score_model": self.settings.score_model,
            "likeness_model": self.settings.likeness_model or self.settings.score_model,
            "likeness": LIKENESS_METHOD, "fidelity": "mean cosine similarity of each sample image with its prompt",
            "best_save_rule": self.settings.rule, "best_save_fidelity_margin": self.settings.margin_percent,
            "training_images": len(self.training_images), "records": records,
            "best": best, "overfitting_from_epoch": overfit}, indent=1))
        for record in new:
            if record.get("save"):
                add_metadata(Path(record["save"]), score_metadata(record, best, self.settings.rule, overfit))
            if self.emit is not None:
                self.emit(Scores(step=record["step"], epoch=record["epoch"], fidelity=record["fidelity"],
                                 likeness=record["likeness"], save=record.get("save"),
                                 best_save=best.get("save") if best else None,
                                 best_step=best["step"] if best else None, overfitting_from_epoch=overfit,
                                 report=str(report)))
