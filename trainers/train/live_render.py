"""Render while paused: the Generate tab asks a paused run for an image (trainers/core/render_request.py), and the
run renders it with its live weights through the sample machinery (trainers/sampling/pipeline.py), at the asked LoRA
multiplier, into the run folder's live/ folder, then says so with a `live_render` event.

Every rank calls the renderer together (as the sample hook does): the main process renders the image, the others
wait. The training goes on as if nothing was rendered: the weights are only read, the multiplier is set back, and
the RNG streams (torch's, CUDA's, Python's and NumPy's) are restored afterwards, so a continued run ends with the
same weights as an unpaused one. A bad request, or a render that fails, is answered with the reason; the run stays
paused."""
from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ContextManager

from trainers.core.events import LiveRender
from trainers.core.options import parse_resolution
from trainers.core.options.typed import DatasetOptions, ModelOptions, OptimizerOptions, SamplingOptions, SavingOptions
from trainers.core.prompts import SamplePrompt
from trainers.core.render_request import RenderRequest, parse_render_request
from trainers.core.rundir import LIVE, update_status
from trainers.train.method import Trainable
from trainers.train.session import Session

Renderer = Callable[[object, int], None]  # (the request's JSON value or the reason it is none, the step)
RENDERING = "rendering"  # status.json's activity while a paused run renders


def live_renderer(session: Session, trainable: Trainable) -> Renderer:
    """A function (request, step) -> None that every rank calls with the same request: it renders the request with
    the live weights on the main process and answers it with a `live_render` event (the image, or why none)."""
    cfg, accelerator = session.cfg, session.accelerator
    sampling = SamplingOptions.of(cfg)
    out_dir = (session.run_dir or Path(SavingOptions.of(cfg).output_dir).expanduser()) / LIVE
    size = parse_resolution(DatasetOptions.of(cfg).resolution)
    seed, clip_skip = OptimizerOptions.of(cfg).seed, ModelOptions.of(cfg).clip_skip
    main = accelerator.is_main_process

    def render(wanted: RenderRequest, step: int) -> Path:
        from trainers.sampling.pipeline import generate_samples, sample_path

        prompt = SamplePrompt(wanted.prompt, wanted.negative, wanted.width, wanted.height, wanted.steps,
                              seed if wanted.seed is None else wanted.seed, wanted.cfg_scale)
        tag = f"step{step:06d}-{_next_number(out_dir):03d}"
        with _rng_kept(), trainable.sampling_weights(), _at(trainable, wanted.multiplier):
            written = generate_samples(trainable.model, [prompt], out_dir, tag, sampler=sampling.sample_sampler,
                                       default_size=size, default_steps=sampling.sample_steps,
                                       default_cfg=sampling.sample_cfg_scale, base_seed=seed,
                                       rank=accelerator.process_index, world_size=accelerator.num_processes,
                                       clip_skip=clip_skip, device=accelerator.device, dtype=session.weight_dtype,
                                       per_prompt=trainable.sampling_prompt)
        if not written:  # another process: the main one rendered it
            return sample_path(out_dir, tag, prompt, trainable.model.family.sample_suffix)
        return written[0].replace(written[0].with_name(tag + written[0].suffix))  # live/step000001-001.png

    def answer(raw: object, step: int) -> None:
        wanted = parse_render_request(raw) if isinstance(raw, dict) else str(raw)
        if isinstance(wanted, str):
            if main:
                request_id = raw.get("id") if isinstance(raw, dict) else None
                session.events.emit(LiveRender(request=str(request_id or ""), step=step, error=wanted))
            return
        if main:
            update_status(session.run_dir, activity=RENDERING)
        path, error = None, None
        try:
            refused = _multiplier_refused(trainable, wanted.multiplier)
            if refused:
                error = refused
            else:
                path = render(wanted, step)
        except Exception as err:  # noqa: BLE001 - answered in the event; the run stays paused
            error = f"the render failed: {type(err).__name__}: {err}"
            _free_cached_memory()  # e.g. out of memory at a large size: training goes on with what it had
        finally:
            accelerator.wait_for_everyone()
            if main:
                update_status(session.run_dir, activity="paused")
        if main:
            used_seed = seed if wanted.seed is None else wanted.seed
            session.events.emit(LiveRender(request=wanted.id, step=step, path=str(path) if path else None,
                                           prompt=wanted.prompt, seed=used_seed, multiplier=wanted.multiplier,
                                           error=error))

    return answer


def went_on(session: Session, raw: object, step: int) -> None:
    """Answer a request the run took only as it went on (Continue or Stop came first): nothing is rendered."""
    request_id = raw.get("id") if isinstance(raw, dict) else None
    session.events.emit(LiveRender(request=str(request_id or ""), step=step,
                                   error="the run went on before it rendered this: pause it again and render"))


def _multiplier_refused(trainable: Trainable, multiplier: float) -> str | None:
    if multiplier == 1.0 or trainable.at_multiplier is not None:
        return None
    if multiplier == 0.0 and trainable.without_output is not None:
        return None
    return (f"this method's output has no multiplier (a LoRA's): render at multiplier 1, not {multiplier:g}")


def _at(trainable: Trainable, multiplier: float) -> ContextManager[Any]:
    if multiplier == 1.0:
        return contextlib.nullcontext()
    if trainable.at_multiplier is not None:
        return trainable.at_multiplier(multiplier)
    assert trainable.without_output is not None  # _multiplier_refused said so
    return trainable.without_output()


def _free_cached_memory() -> None:
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _next_number(folder: Path) -> int:
    """One more than the live renders in `folder` so far (1 for the first)."""
    try:
        return sum(1 for path in folder.iterdir() if path.is_file() and not path.name.startswith(".")) + 1
    except FileNotFoundError:
        return 1


@contextlib.contextmanager
def _rng_kept() -> Iterator[None]:
    """Python's and NumPy's RNG states restored after the block (generate_samples forks torch's and CUDA's)."""
    import numpy as np

    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
