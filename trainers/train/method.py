"""What a training method plugs into the shared loop (each method's trainer.py defines `METHOD`).

A method builds a `Trainable`: the model, the module that is trained (wrapped for DDP), its parameter
groups, how its output is saved, and the step hooks it needs (an EMA, freezing a module at a step).
The loop calls every hook at the same fixed points of every step, in list order.
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ContextManager, Protocol

from torch import Tensor, nn

from trainers.core.options import TrainConfig
from trainers.core.registry import method_spec
from trainers.models import LoadedModel
from trainers.train.diffusion import diffusion_loss

if TYPE_CHECKING:
    from trainers.core.prompts import SamplePrompt
    from trainers.core.events import EventWriter
    from trainers.train.session import Session


class Output(Protocol):
    """How a method writes what it trains (a LoRA file, a model folder and/or single file)."""

    suffix: str  # after a save's name: ".safetensors", or "" for a folder

    def save(self, path: Path, epoch: int, step: int) -> None: ...

    def nbytes(self) -> int:
        """About what one save takes on disk (checked against the free space before saving)."""


class StepHook:
    """Work a method adds at fixed points of every step; override what is needed."""

    def after_backward(self) -> None:
        """After the backward pass, before clipping and the optimizer step (gradients can be changed here)."""

    def after_step(self, step: int) -> None:
        """After optimizer step `step` (1-based)."""

    def state(self) -> dict[str, Tensor]:
        """Tensors a training state needs besides the trained weights (keys unique across hooks)."""
        return {}

    def restore(self, tensors: dict[str, Tensor], step: int) -> None:
        """On resume: every hook's saved tensors (possibly none of its own) and the step resumed at."""

    def sampling_weights(self) -> ContextManager[Any]:
        """Weights sample images are made with, swapped in for the block (e.g. an EMA)."""
        return contextlib.nullcontext()

    def sampling_prompt(self, prompt: "SamplePrompt", width: int, height: int) -> ContextManager[Any]:
        """What one sample prompt renders with, set for the block (e.g. a ControlNet's control image)."""
        return contextlib.nullcontext()

    def progress(self) -> dict[str, Any]:
        """Fields this hook adds to the step's progress event (names of trainers.core.events.Progress)."""
        return {}


@dataclass
class Trainable:
    model: LoadedModel
    predictor: nn.Module  # everything with trained weights as one module (the one DDP wraps)
    param_groups: list[dict[str, Any]]
    output: Output
    hooks: list[StepHook] = field(default_factory=list)
    # The step's loss: (predictor, model, batch, NoiseOptions, weight dtype) -> loss; a method may score more than
    # its images' denoising (a slider's direction, a preservation term).
    objective: Callable[..., Tensor] = diffusion_loss
    # The base model for the block, without what the run trains (a LoRA at multiplier 0): the save health check
    # renders its effect image against it. None: the method has no such switch (the effect is not checked).
    without_output: Callable[[], ContextManager[Any]] | None = None
    # What the run trains at another weight for the block (a LoRA at a multiplier): a paused run's live render
    # (trainers/train/live_render.py) at the Generate tab's multiplier. None: the output renders at 1 only.
    at_multiplier: Callable[[float], ContextManager[Any]] | None = None

    def state(self) -> dict[str, Tensor]:
        return {k: v for hook in self.hooks for k, v in hook.state().items()}

    @contextlib.contextmanager
    def sampling_weights(self) -> Any:
        with contextlib.ExitStack() as stack:
            for hook in self.hooks:
                stack.enter_context(hook.sampling_weights())
            yield

    @contextlib.contextmanager
    def sampling_prompt(self, prompt: "SamplePrompt", width: int, height: int) -> Any:
        with contextlib.ExitStack() as stack:
            for hook in self.hooks:
                stack.enter_context(hook.sampling_prompt(prompt, width, height))
            yield


class Method:
    """A training method: what it prepares before the data is read, and what it trains."""

    def prepare(self, cfg: TrainConfig, accelerator: Any, events: "EventWriter", weight_dtype: Any) -> None:
        """Before the dataset is scanned (dreambooth generates missing class images here)."""

    def make_trainable(self, cfg: TrainConfig, session: "Session") -> Trainable:
        raise NotImplementedError


def method_of(cfg: TrainConfig) -> Method:
    """The training method's plug-in: `METHOD` of its trainer module (trainers/core/registry.py names it)."""
    return importlib.import_module(method_spec(cfg.method).trainer).METHOD


def freeze(*modules: nn.Module) -> None:
    for m in modules:
        m.requires_grad_(False)
        m.eval()
