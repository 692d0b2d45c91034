"""Failures met while training, told with their cause: non-finite losses and gradients, running out of memory.

(The exception types are in trainers/core/errors.py.) A method's own memory advice is handed in (`MemoryTips`, its
rules' `memory_tips`): this module sits below the methods and does not look them up.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trainers.core.errors import NonFiniteLoss, OutOfMemory

if TYPE_CHECKING:
    import torch

    from trainers.core.events import EventWriter
    from trainers.core.options import TrainConfig

MemoryTips = Callable[["TrainConfig"], list[str]]  # what a method could change to use less memory (MethodRules)

_OOM_TEXT = re.compile(r"out of memory|can't allocate memory|CUBLAS_STATUS_ALLOC_FAILED|MPS backend out of memory",
                       re.IGNORECASE)


def is_out_of_memory(err: BaseException) -> bool:
    """A GPU (or host) allocation failure, as torch raises it."""
    import torch

    if isinstance(err, torch.cuda.OutOfMemoryError) or isinstance(err, MemoryError):
        return True
    return isinstance(err, RuntimeError) and bool(_OOM_TEXT.search(str(err)))


def memory_suggestions(cfg: "TrainConfig", method_tips: Sequence[str]) -> list[str]:
    """What would make this config fit in less memory, most effective first; only what is not done yet.
    `method_tips` are the method's own (its rules' `memory_tips(cfg)`), told after the shared ones."""
    from trainers.core.options import parse_resolution
    from trainers.core.options.typed import DatasetOptions, OptimizerOptions, PrecisionOptions

    opts, precision, data = OptimizerOptions.of(cfg), PrecisionOptions.of(cfg), DatasetOptions.of(cfg)
    tips: list[str] = []
    if opts.train_batch_size > 1:
        tips.append(f"lower train_batch_size (now {opts.train_batch_size}); raise gradient_accumulation_steps to "
                    "keep the same effective batch")
    if not precision.gradient_checkpointing:
        tips.append("turn on gradient_checkpointing (much less memory, about 20% slower)")
    if precision.mixed_precision == "no":
        tips.append("set mixed_precision = 'bf16' (or 'fp16' on GPUs without bf16)")
    if opts.optimizer_type == "AdamW":
        tips.append("use optimizer_type = 'AdamW8bit' (or 'Adafactor')")
    if not (data.cache_latents or data.cache_latents_to_disk):
        tips.append("turn on cache_latents (the VAE does not run during steps)")
    tips += method_tips
    try:
        width, height = parse_resolution(data.resolution)
    except ValueError:
        width = height = 0
    if width * height > 512 * 512:
        tips.append(f"lower resolution (now {data.resolution}; e.g. '{max(512, width * 3 // 4 // 64 * 64)}')")
    if not precision.sdpa:
        tips.append("turn sdpa back on (memory-efficient attention)")
    return tips


def out_of_memory(cfg: "TrainConfig", err: BaseException, step: int, method_tips: Sequence[str]) -> OutOfMemory:
    """The error a run ends with when memory runs out: where, how much was asked, and what to change (the method's
    own advice: `method_tips`)."""
    import torch

    gpu = isinstance(err, torch.cuda.OutOfMemoryError) or any(k in str(err) for k in ("CUDA", "CUBLAS", "MPS"))
    device = "GPU" if gpu else "system"
    asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]iB)", str(err))
    where = f"at step {step + 1}" if step else "in the first step"
    tips = memory_suggestions(cfg, method_tips)
    message = (f"out of {device} memory {where}" + (f" (tried to allocate {asked.group(1)})" if asked else "")
               + (". To fit: " + "; ".join(tips) if tips else ". The settings already save memory: use a smaller "
                  "model, a lower resolution or a GPU with more memory"))
    return OutOfMemory(message, suggestions=tips, cause=str(err).splitlines()[0][:300] if str(err) else "")


class LossGuard:
    """Non-finite gradients never reach the weights; `limit` such steps in a row stop the run.

    A NaN/inf loss gives non-finite gradients. The gradient norm is the same on every process
    (gradients are all-reduced), so every process skips the same updates and stops together.
    """

    def __init__(self, cfg: "TrainConfig", accelerator: Any, params: list["torch.Tensor"], events: "EventWriter") -> None:
        from trainers.core.options.typed import OptimizerOptions, PrecisionOptions, SavingOptions

        self.opts, self.precision = OptimizerOptions.of(cfg), PrecisionOptions.of(cfg)
        self.accelerator, self.params, self.events = accelerator, params, events
        self.limit = int(SavingOptions.of(cfg).nan_steps_before_stop)
        self.bad: list[int] = []  # the steps of the current run of skipped updates
        self.dropped = False

    def clip_or_drop(self) -> None:
        """Before the optimizer step: clip to max_grad_norm; drop gradients that are not finite."""
        import torch

        grads = [p.grad for p in self.params if p.grad is not None]
        if self.opts.max_grad_norm:
            norm = self.accelerator.clip_grad_norm_(self.params, self.opts.max_grad_norm)
        elif grads:  # one foreach kernel over every gradient, not one norm each
            norm = torch.nn.utils.get_total_norm(grads)
        else:
            norm = None
        self.dropped = norm is not None and not bool(torch.isfinite(torch.as_tensor(norm)))
        if self.dropped and getattr(self.accelerator, "scaler", None) is None:  # fp16: the grad scaler skips it
            for p in self.params:
                p.grad = None

    def after_step(self, step: int) -> None:
        """After optimizer step `step`; raises NonFiniteLoss when `limit` updates in a row were dropped."""
        if not self.dropped:
            self.bad.clear()
            return
        self.bad.append(step)
        if len(self.bad) == 1 and self.accelerator.is_main_process:
            self.events.warn(f"the loss or its gradients are NaN/inf at step {step}; that update was skipped")
        if len(self.bad) >= self.limit:
            raise NonFiniteLoss(self.message(), steps=list(self.bad))

    def message(self) -> str:
        opts, first = self.opts, self.bad[0]
        tips = [f"lower learning_rate (now {opts.learning_rate:g})"]
        if self.precision.mixed_precision == "fp16":
            tips.append("use mixed_precision = 'bf16' if the GPU has it (fp16 overflows)")
            tips.append("turn on no_half_vae")
        if not opts.max_grad_norm:
            tips.append("set max_grad_norm = 1.0")
        tips.append("check the images (a broken or blank image can do this)")
        return (f"the loss was NaN/inf for {len(self.bad)} steps in a row (steps {first}-{self.bad[-1]}); those "
                f"updates were skipped, so the weights are those of step {first - 1}. Try: " + "; ".join(tips))


def weights_finite(params: list["torch.Tensor"]) -> bool:
    """True when every trained weight is finite (checked before anything is saved)."""
    import torch

    with torch.no_grad():
        # a DTensor (FSDP2) is checked in the shard this process holds: no collective on the main process alone
        return all(bool(torch.isfinite(getattr(p, "_local_tensor", p)).all()) for p in params)
