"""Text encoders read from their files only when something needs them (issue 42).

A run that caches its text encoders' outputs on disk loads its model with the encoders deferred
(`load_model(defer_text_encoders=True)`): each one is a `PendingEncoder` standing in for it, which costs its config
file and no weights. When every caption and sample prompt is in the cache, nothing asks for more and the encoders are
never read into host RAM. The first encoding of a text that is not cached (`LoadedModel.encode_texts`, the caption
pass placing them on the device) reads them (`read_pending`) and puts the real modules in the model's list; a stand-in
that something else still holds (a sample pipeline built before) hands every call on to the module it read.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, MutableSequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

_DEFERRING: contextvars.ContextVar[bool] = contextvars.ContextVar("defer_text_encoders", default=False)


@contextlib.contextmanager
def deferring_text_encoders(enabled: bool = True) -> Iterator[None]:
    """Text encoders loaded inside (`load_text_encoder`) are stand-ins, read on first need."""
    token = _DEFERRING.set(enabled)
    try:
        yield
    finally:
        _DEFERRING.reset(token)


def load_text_encoder(cls: Any, folder: Path, subfolder: str, dtype: torch.dtype, random_init: bool) -> nn.Module:
    """A transformers text encoder of a diffusers folder (components.load_component), or its stand-in while
    `deferring_text_encoders` is on."""
    from trainers.models.components import load_component

    if not _DEFERRING.get():
        return load_component(cls, folder, subfolder, dtype, random_init)
    config = cls.config_class.from_pretrained(folder / subfolder)
    return PendingEncoder(_Reader(cls, folder, subfolder, dtype, random_init), config, dtype, f"{folder / subfolder}")


class _Reader:
    """What reads a stand-in's encoder (a class, not a closure: a stand-in pickles like the module it stands for)."""

    def __init__(self, cls: Any, folder: Path, subfolder: str, dtype: torch.dtype, random_init: bool) -> None:
        self.cls, self.folder, self.subfolder, self.dtype, self.random_init = cls, folder, subfolder, dtype, random_init

    def __call__(self) -> nn.Module:
        from trainers.models.components import load_component

        return load_component(self.cls, self.folder, self.subfolder, self.dtype, self.random_init)


class PendingEncoder(nn.Module):
    """A text encoder not read yet. It answers what is asked of an encoder that is only handed around (its config,
    dtype and device; eval mode and frozen weights are remembered; its modules: itself) without reading it; a call,
    its weights, a device move or any other attribute read it first (`read`) and go to it."""

    def __init__(self, reader: Callable[[], nn.Module], config: Any, dtype: torch.dtype, where: str) -> None:
        super().__init__()
        for name, value in (("_reader", reader), ("_config", config), ("_dtype", dtype), ("_where", where),
                            ("_real", None), ("_grad", None), ("_on_read", [])):
            object.__setattr__(self, name, value)  # plain attributes, not submodules or parameters
        self.train(False)  # as from_pretrained gives it

    @property
    def pending(self) -> bool:
        """True until the encoder is read."""
        return self._real is None

    @property
    def config(self) -> Any:
        return self._config if self._real is None else self._real.config

    @property
    def dtype(self) -> torch.dtype:
        """The dtype it is read in (its weights' first dtype, as a read encoder's)."""
        return self._dtype if self._real is None else self._real.dtype

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self._real is None else self._real.device

    def read(self) -> nn.Module:
        """The encoder, read from its files the first time (then as this stand-in was told: eval or train mode,
        frozen weights, and each `when_read` hook in order)."""
        if self._real is None:
            print(f"reading the text encoder {self._where} (deferred until needed: its texts were not all in the text cache)", flush=True)
            real = self._reader()
            real.train(self.training)
            if self._grad is not None:
                real.requires_grad_(self._grad)
            for hook in self._on_read:
                hook(real)
            object.__setattr__(self, "_real", real)
        return self._real

    def when_read(self, hook: Callable[[nn.Module], None]) -> None:
        """`hook` on the encoder once it is read (now, when it already was)."""
        if self._real is None:
            self._on_read.append(hook)
        else:
            hook(self._real)

    # --- what a pending encoder answers itself ---

    def train(self, mode: bool = True) -> PendingEncoder:
        if self._real is not None:
            self._real.train(mode)
        self.training = mode
        return self

    def requires_grad_(self, requires_grad: bool = True) -> PendingEncoder:
        if self._real is not None:
            self._real.requires_grad_(requires_grad)
        object.__setattr__(self, "_grad", requires_grad)
        return self

    # --- what reads it ---

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.read()(*args, **kwargs)

    def _apply(self, fn: Any, recurse: bool = True) -> PendingEncoder:  # to(), cuda(), cpu(), half(), ...
        self.read()._apply(fn, recurse)
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.read().state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.read().load_state_dict(*args, **kwargs)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:  # parameters() too
        return self.read().named_parameters(*args, **kwargs)

    def named_buffers(self, *args: Any, **kwargs: Any) -> Any:  # buffers() too
        return self.read().named_buffers(*args, **kwargs)

    def named_modules(self, memo: set[nn.Module] | None = None, prefix: str = "", remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, nn.Module]]:  # modules() too
        """Its layers once read; until then itself alone, read nothing: diffusers' pipelines look through every
        component's modules for offload hooks when they run. What needs its layers reads it first (read_pending)."""
        if self._real is not None:
            yield from self._real.named_modules(memo, prefix, remove_duplicate)
        elif memo is None or self not in memo:
            yield prefix, self

    def named_children(self) -> Any:  # children() too
        return self.read().named_children()

    def apply(self, fn: Callable[[nn.Module], None]) -> PendingEncoder:
        self.read().apply(fn)
        return self

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_"):  # probes such as accelerate's hasattr(module, "_hf_hook") read nothing
                raise
        return getattr(self.read(), name)

    def extra_repr(self) -> str:
        return f"{self._where}, not read yet" if self._real is None else f"{self._where}, read"


def is_pending(module: Any) -> bool:
    """A stand-in whose encoder is not read yet."""
    return isinstance(module, PendingEncoder) and module.pending


def read_pending(encoders: MutableSequence[nn.Module]) -> None:
    """Each stand-in of `encoders` read and replaced in the list by the encoder it read."""
    for index, encoder in enumerate(encoders):
        if isinstance(encoder, PendingEncoder):
            encoders[index] = encoder.read()


def each_encoder(encoders: MutableSequence[nn.Module], hook: Callable[[nn.Module], None]) -> None:
    """`hook` on each encoder now, or on one not read yet when it is read."""
    for encoder in encoders:
        if isinstance(encoder, PendingEncoder):
            encoder.when_read(hook)
        else:
            hook(encoder)
