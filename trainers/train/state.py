"""The resumable state of a run: trained weights, optimizer, LR scheduler, RNG, grad scaler, extras (EMA)
and the position in the data, written as one atomic folder with a manifest (see checkpoints.py).

Only trained weights go in (a LoRA, or the trained UNet/text encoders); the frozen base model
is loaded from the config again. The weights and optimizer state are laid out one of three ways
(the manifest's `layout`):
- "whole": weights.safetensors + optimizer.pt, written by the main process. Under DDP every process holds
  the same; under FSDP2 with fsdp_state_dict_type = 'FULL_STATE_DICT' the shards are gathered onto its CPU.
- "sharded": FSDP2's default: every process writes its own shards into shards/ (torch.distributed.checkpoint),
  so none holds the whole optimizer state; a resume re-cuts them for its own process count (or none).
- "deepspeed": DeepSpeed's own checkpoint (its engine's save_checkpoint: every process its ZeRO partition) in
  deepspeed/; it resumes on the same number of processes.
The rest (scheduler, RNG, scaler, extras, manifest) is written by the main process into the same temp folder,
which becomes the state folder only when every part is complete.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions
from torch.distributed.tensor import DTensor

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.events import Resume
from trainers.core.fsio import atomic_dir
from trainers.core.options.typed import LaunchOptions, ModelOptions, OptimizerOptions, SavingOptions
from trainers.core.saves import MANIFEST, Position, folder_files, manifest_for, read_manifest, resolve_resume
from trainers.train.faults import weights_finite

if TYPE_CHECKING:
    from trainers.train.method import Trainable
    from trainers.train.session import Session

WEIGHTS, EXTRA, OPTIMIZER, SCHEDULER, RNG, SCALER = (
    "weights.safetensors", "extra.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt", "scaler.pt")
SHARDS, DEEPSPEED = "shards", "deepspeed"  # the folders of the "sharded" and "deepspeed" layouts
WHOLE, SHARDED = "whole", "sharded"  # layouts (DEEPSPEED the third)
_WHOLE = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered onto the main process's CPU
_WHOLE_IN = StateDictOptions(full_state_dict=True)  # every process reads the whole state and keeps its shard
# Options that do not change what is trained; a resume with other values is not worth a warning.
_NOT_TRAINING = {"saving", "logging", "sampling", "launch"}


class TrainingState:
    def __init__(self, session: "Session", trainable: "Trainable", predictor: torch.nn.Module, optimizer: Any,
                 lr_scheduler: Any, params: list[torch.Tensor]) -> None:
        self.session, self.trainable = session, trainable
        self.optimizer, self.lr_scheduler = optimizer, lr_scheduler
        self.launch, self.saving = LaunchOptions.of(session.cfg), SavingOptions.of(session.cfg)
        self.optimizer_type = OptimizerOptions.of(session.cfg).optimizer_type
        self.base_model = ModelOptions.of(session.cfg).pretrained_model_name_or_path
        self.params = params
        self.module = session.accelerator.unwrap_model(predictor)
        wanted = {id(p) for p in params}
        self.named = {name: p for name, p in self.module.named_parameters() if id(p) in wanted}
        self.complete = len(self.named) == len(wanted)  # not under FSDP1 (flat parameters): no states there
        self.sharded = any(isinstance(p, DTensor) for p in params)  # FSDP2: each process holds a shard
        self.engine: Any = predictor if _is_deepspeed(session.accelerator) else None  # DeepSpeed's engine
        self.layout = (DEEPSPEED if self.engine is not None else
                       SHARDED if self.sharded and self.launch.fsdp_state_dict_type == "SHARDED_STATE_DICT" else WHOLE)
        self.collective = self.sharded or self.engine is not None  # every process takes part in a save
        self.resumed_at: Position | None = None
        # When this run, or the first of the runs it resumes, started: its saves are newer (written_before)
        self.run_started: float | None = session.started_at

    # --- writing ---

    def nbytes(self) -> int:
        """About what a state takes on disk (weights, optimizer state, extras)."""
        total = sum(p.numel() * p.element_size() for p in self.params)
        for per_param in self.optimizer.state.values():
            total += sum(t.numel() * t.element_size() for t in per_param.values() if isinstance(t, torch.Tensor))
        if self.engine is not None:  # ZeRO: this process's partition of the master weights and their states
            total *= self.session.accelerator.num_processes
            total += sum(p.numel() * p.element_size() for p in self.module.parameters())
        total += sum(t.numel() * t.element_size() for t in self.trainable.state().values())
        return total

    def finite(self) -> bool:
        return weights_finite(self.params)

    def snapshot(self) -> Snapshot | None:
        """The trained weights and the optimizer state, whole, on the main process (None elsewhere).

        Every process calls it: under FSDP2 the shards are gathered (onto the CPU) for the main process to write,
        with the optimizer state keyed by parameter name, so the state resumes on any number of processes.
        """
        if not self.complete:
            raise RuntimeError("the trained weights are not all named parameters of the trained module (FSDP1?); "
                               "training states need distributed_backend = 'ddp', or 'fsdp' with fsdp_version = 2")
        main = self.session.accelerator.is_main_process
        if not self.sharded:
            return Snapshot({n: p.detach().to("cpu").contiguous() for n, p in self.named.items()},
                            self.optimizer.state_dict()) if main else None
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        weights = {n: p.detach().full_tensor().to("cpu") for n, p in self.named.items()}
        optimizer = get_optimizer_state_dict(self.module, _torch_optimizer(self.optimizer), options=_WHOLE)
        return Snapshot(weights, optimizer) if main else None

    def save(self, folder: Path, at: Position, kind: str, output: Path | None = None) -> Path:
        """Write the state to `folder`, atomically. Every process calls it when `collective` (they gather or write
        their shards); otherwise the main process may call it alone (an emergency state)."""
        from safetensors.torch import save_file

        if self.layout == WHOLE:
            snapshot = self.snapshot()  # FSDP2: every process joins the gather
            if snapshot is not None:  # the main process
                with atomic_dir(folder) as tmp:
                    save_file({n: t.contiguous() for n, t in snapshot.weights.items()}, tmp / WEIGHTS)
                    torch.save(snapshot.optimizer, tmp / OPTIMIZER)
                    self._write_rest(tmp, at, kind, output)
            return folder
        with _shared_temp_dir(self.session.accelerator, folder) as tmp:
            if self.layout == SHARDED:
                import torch.distributed.checkpoint as dcp

                dcp.save(self._shard_dict(), checkpoint_id=tmp / SHARDS)
            else:
                self.engine.save_checkpoint(str(tmp), tag=DEEPSPEED, save_latest=False)
            self.session.accelerator.wait_for_everyone()  # every process's part is on disk
            _check_shared(self.session.accelerator, tmp)
            if self.session.accelerator.is_main_process:
                self._write_rest(tmp, at, kind, output)
        return folder

    def _shard_dict(self) -> dict[str, Any]:
        """What torch.distributed.checkpoint saves and loads in place: the trained weights and the optimizer state,
        both keyed by parameter name (each process's shards of them under FSDP2; whole tensors elsewhere)."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return {"weights": {n: p.detach() for n, p in self.named.items()},
                "optimizer": get_optimizer_state_dict(self.module, _torch_optimizer(self.optimizer))}

    def _write_rest(self, tmp: Path, at: Position, kind: str, output: Path | None) -> None:
        """Scheduler, RNG, scaler, extras and, last, the manifest (main process)."""
        from safetensors.torch import save_file

        cfg, session = self.session.cfg, self.session
        extra = self.trainable.state()
        if extra:
            save_file({k: t.detach().to("cpu").contiguous() for k, t in extra.items()}, tmp / EXTRA)
        torch.save(self.lr_scheduler.state_dict(), tmp / SCHEDULER)
        torch.save(rng_state(), tmp / RNG)
        scaler = getattr(session.accelerator, "scaler", None)
        if scaler is not None:
            torch.save(scaler.state_dict(), tmp / SCALER)
        manifest = manifest_for(
            kind, at, layout=self.layout, method=cfg.method, model_family=session.model.family.name,
            pretrained_model_name_or_path=self.base_model, output_name=self.saving.output_name,
            output=str(output) if output else None, run_started=self.run_started, total_steps=session.plan.total_steps,
            batches_per_epoch=session.sampler.groups_per_epoch(), num_processes=session.accelerator.num_processes,
            config_hash=config_hash(cfg.values), config=_jsonable(cfg.values), files=folder_files(tmp))
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")

    # --- resuming ---

    def restore(self, folder: Path) -> Position:
        """Load the state of `folder` into the run (every process) and return where to continue."""
        from safetensors.torch import load_file

        session = self.session
        try:
            manifest = read_manifest(folder)
        except ValueError as err:
            raise resume_error(str(err)) from None
        from torch.distributed.checkpoint.api import CheckpointException

        layout = manifest.get("layout", WHOLE)
        problems = self._mismatches(manifest) + self._layout_mismatches(manifest, layout)
        weights = load_file(folder / WEIGHTS) if layout == WHOLE else {}
        if layout == WHOLE:
            problems += self._shape_mismatches({n: tuple(t.shape) for n, t in weights.items()})
        elif layout == SHARDED:
            problems += self._shape_mismatches(_sharded_shapes(folder / SHARDS))
        if problems:
            raise resume_error(f"{folder} cannot continue this run: " + "; ".join(problems))
        base_lrs = list(getattr(self.lr_scheduler, "base_lrs", []))
        try:
            if layout == WHOLE:
                self._load_weights(weights)
                self._load_optimizer(torch.load(folder / OPTIMIZER, map_location="cpu", weights_only=True))
            elif layout == SHARDED:
                self._load_shards(folder / SHARDS)
            elif self.engine.load_checkpoint(str(folder), tag=DEEPSPEED, load_lr_scheduler_states=False)[0] is None:
                raise ValueError(f"DeepSpeed found no checkpoint in {folder / DEEPSPEED}")
            self.lr_scheduler.load_state_dict(torch.load(folder / SCHEDULER, weights_only=True))
        except (ValueError, KeyError, RuntimeError, AssertionError, CheckpointException) as err:
            raise resume_error(f"the optimizer state in {folder} does not fit this run ({err}); resume with the same "
                               "optimizer_type, optimizer_args and trained modules") from None
        self._use_learning_rates(base_lrs)
        if session.accelerator.is_main_process:
            set_rng_state(torch.load(folder / RNG, weights_only=True))
        scaler = getattr(session.accelerator, "scaler", None)
        if scaler is not None and (folder / SCALER).is_file():
            scaler.load_state_dict(torch.load(folder / SCALER, weights_only=True))
        extra = load_file(folder / EXTRA) if (folder / EXTRA).is_file() else {}
        for hook in self.trainable.hooks:
            hook.restore(extra, int(manifest["step"]))
        at = self._position(manifest)
        self.resumed_at = at
        self.run_started = manifest.get("run_started")  # None in a state written before states recorded it
        self._announce(folder, manifest, at)
        return at

    def _load_shards(self, shards: Path) -> None:
        """Every process reads its own shards of the weights and optimizer state (re-cut when the state was saved by
        another number of processes; whole tensors when this run is not sharded)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        into = self._shard_dict()  # the weights are read into the parameters themselves
        dcp.load(into, checkpoint_id=shards, no_dist=not torch.distributed.is_initialized())  # one plain process
        set_optimizer_state_dict(self.module, _torch_optimizer(self.optimizer), into["optimizer"])

    def _load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        """Every process loads the whole weights; under FSDP2 each keeps its own shard of them."""
        with torch.no_grad():
            for name, p in self.named.items():
                whole = weights[name]
                if isinstance(p, DTensor):
                    from torch.distributed.tensor import distribute_tensor

                    whole = distribute_tensor(whole.to(p.dtype), p.device_mesh, p.placements, src_data_rank=None).to_local()
                    p.to_local().copy_(whole)
                else:
                    p.copy_(whole.to(p.device, p.dtype))

    def _load_optimizer(self, saved: dict[str, Any]) -> None:
        """A state keyed by parameter name (saved under FSDP2) fits any sharding; one keyed by position (DDP) fits
        the same unsharded parameters."""
        by_name = any(isinstance(key, str) for key in saved.get("state", {}))
        if by_name or self.sharded:
            from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

            saved = saved if by_name else self._keyed_by_name(saved)  # a DDP state resumed under FSDP2
            set_optimizer_state_dict(self.module, _torch_optimizer(self.optimizer), saved, options=_WHOLE_IN)
        else:
            self.optimizer.load_state_dict(saved)

    def _keyed_by_name(self, saved: dict[str, Any]) -> dict[str, Any]:
        """A state keyed by position (as DDP saves it) keyed by parameter name: positions follow this optimizer's
        parameter order, which a run of the same options builds whatever its backend."""
        names = {id(p): name for name, p in self.named.items()}
        order = [names[id(p)] for group in _torch_optimizer(self.optimizer).param_groups for p in group["params"]]
        positions = [i for group in saved["param_groups"] for i in group["params"]]
        if len(positions) != len(order):
            raise ValueError(f"it holds {len(positions)} trained tensors and this run trains {len(order)}")
        name_of = dict(zip(positions, order))
        return {"state": {name_of[i]: value for i, value in saved["state"].items()},
                "param_groups": [{**group, "params": [name_of[i] for i in group["params"]]}
                                 for group in saved["param_groups"]]}

    def _mismatches(self, manifest: dict[str, Any]) -> list[str]:
        cfg, family = self.session.cfg, self.session.model.family.name
        problems = []
        if manifest.get("method") != cfg.method:
            problems.append(f"it is a {manifest.get('method')} state and this is a {cfg.method} run")
        if manifest.get("model_family") != family:
            problems.append(f"it was trained on a {manifest.get('model_family')} model and this model is {family}")
        saved_optimizer = manifest.get("config", {}).get("optimizer_type")
        if saved_optimizer and saved_optimizer != self.optimizer_type:
            problems.append(f"it was trained with optimizer_type {saved_optimizer!r} and this config has "
                            f"{self.optimizer_type!r}")
        return problems

    def _layout_mismatches(self, manifest: dict[str, Any], layout: str) -> list[str]:
        """DeepSpeed resumes its own states only, with the ZeRO stage and process count they were saved with."""
        saved = manifest.get("config", {})
        backend = saved.get("distributed_backend", "ddp")
        if layout != DEEPSPEED:
            return [] if self.engine is None else [
                f"it was saved with distributed_backend = {backend!r} and a DeepSpeed run resumes DeepSpeed states "
                "only: resume with that backend, or start from its saved model (pretrained_model_name_or_path)"]
        processes, now = manifest.get("num_processes"), self.session.accelerator.num_processes
        if self.engine is None:
            return [f"it is a DeepSpeed state: resume it with distributed_backend = 'deepspeed' on {processes} "
                    "processes"]
        problems = []
        if saved.get("zero_stage") != self.launch.zero_stage:
            problems.append(f"it was saved with zero_stage = {saved.get('zero_stage')} and this run has "
                            f"{self.launch.zero_stage}: set zero_stage = {saved.get('zero_stage')}")
        if processes != now:
            problems.append(f"it was saved by {processes} DeepSpeed processes and this run has {now}: a DeepSpeed "
                            "state resumes on the same number of processes (num_processes x num_machines)")
        return problems

    def _shape_mismatches(self, shapes: dict[str, tuple[int, ...]]) -> list[str]:
        missing = [n for n in self.named if n not in shapes]
        extra = [n for n in shapes if n not in self.named]
        wrong = [n for n, p in self.named.items() if n in shapes and tuple(shapes[n]) != tuple(p.shape)]
        if not (missing or extra or wrong):
            return []
        if wrong:
            n = wrong[0]
            detail = f"{n} is {list(shapes[n])} there and {list(self.named[n].shape)} here"
        else:
            detail = f"{len(missing)} trained tensors are not in it, {len(extra)} of it are not trained here " \
                     f"(e.g. {(missing or extra)[0]})"
        return [f"the trained weights differ ({detail}); network_dim, conv_dim and what is trained (text encoder, "
                "UNet) must be the same as when it was saved"]

    def _use_learning_rates(self, base_lrs: list[float]) -> None:
        """The schedule goes on from the saved step, with this config's learning rates (which may be new)."""
        sched = self.lr_scheduler
        lambdas = getattr(sched, "lr_lambdas", None)
        if not base_lrs or lambdas is None:
            return
        sched.base_lrs = base_lrs
        for group, base, lam in zip(self.optimizer.param_groups, base_lrs, lambdas):
            group["initial_lr"] = base
            group["lr"] = base * lam(sched.last_epoch)
        sched._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _position(self, manifest: dict[str, Any]) -> Position:
        at = Position.of_manifest(manifest)
        saved, now = int(manifest.get("batches_per_epoch") or 0), self.session.sampler.groups_per_epoch()
        if saved and saved != now and not at.epoch_done:  # another process count: the same share of the epoch
            at = Position(at.step, at.epoch, min(now, round(at.batches * now / saved)), False)
            self._warn(f"the state was saved with {saved} batches an epoch and this run has {now} (another number "
                       f"of processes or images); the epoch goes on from batch {at.batches}")
        return at

    def _announce(self, folder: Path, manifest: dict[str, Any], at: Position) -> None:
        cfg = self.session.cfg
        changed = changed_options(manifest.get("config", {}), cfg.values)
        if changed:
            self._warn("resumed with changed options: " + ", ".join(changed))
        if at.step >= self.session.plan.total_steps:
            self._warn(f"the state is at step {at.step} and this run has {self.session.plan.total_steps} steps: "
                       "nothing is left to train (raise max_train_steps or max_train_epochs to go on)")
        if self.session.accelerator.is_main_process:
            print(f"resuming from {folder} at step {at.step} (epoch {at.epoch}, batch {at.batches})", flush=True)
            self.session.events.emit(Resume(path=str(folder), step=at.step, epoch=at.epoch, batches=at.batches,
                                            saved_kind=manifest.get("kind")))

    def _warn(self, message: str) -> None:
        self.session.events.warn(message)


@dataclass
class Snapshot:
    """What a training state holds of the model and optimizer, whole and on the CPU."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]


def _torch_optimizer(optimizer: Any) -> Any:
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it


def _is_deepspeed(accelerator: Any) -> bool:
    from accelerate.utils import DistributedType

    return accelerator.distributed_type == DistributedType.DEEPSPEED


def _sharded_shapes(shards: Path) -> dict[str, tuple[int, ...]]:
    """Parameter name -> whole shape of the weights in a torch.distributed.checkpoint folder (its metadata only)."""
    from torch.distributed.checkpoint import FileSystemReader

    entries = FileSystemReader(str(shards)).read_metadata().state_dict_metadata
    return {key.removeprefix("weights."): tuple(entry.size) for key, entry in entries.items()
            if key.startswith("weights.") and hasattr(entry, "size")}


@contextlib.contextmanager
def _shared_temp_dir(accelerator: Any, folder: Path) -> Iterator[Path]:
    """The main process's atomic_dir for `folder`, on every process: each writes its part into the temp folder,
    which becomes `folder` when the block ends on the main process (after every process has written)."""
    main = accelerator.is_main_process
    with atomic_dir(folder) if main else contextlib.nullcontext() as tmp:
        holder = [str(tmp) if main else None]
        if accelerator.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(holder, from_process=0)
        yield Path(str(holder[0]))


def _check_shared(accelerator: Any, tmp: Path) -> None:
    """Every file another process wrote is one the main process sees (else output_dir is not shared storage, and
    the state would lack those machines' shards)."""
    if accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    written = set(gather_object(list(folder_files(tmp))))
    unseen = sorted(written - set(folder_files(tmp))) if accelerator.is_main_process else []
    if unseen:
        raise RuntimeError(f"the training state's files written by other processes are not in {tmp.parent} on the "
                           f"main machine (e.g. {unseen[0]}): output_dir must be storage every machine shares")


def resume_folder(saving: SavingOptions) -> Path:
    """The state folder the config's `resume` names ('latest' or a folder); a ConfigError naming `resume` if none."""
    try:
        return resolve_resume(saving.resume, saving.output_dir, saving.output_name)
    except ValueError as err:
        raise resume_error(str(err)) from None


def resume_error(message: str) -> ConfigError:
    return ConfigError([ConfigIssue("resume", message, "saving")])


def rng_state() -> dict[str, Any]:
    import numpy as np

    legacy: Any = np.random.get_state()  # numpy's (kind, keys, pos, has_gauss, cached)
    kind, keys, pos, has_gauss, cached = legacy
    return {"python": random.getstate(), "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def _training_options(values: dict[str, Any]) -> dict[str, Any]:
    from trainers.core.options.training import BY_NAME

    return {k: v for k, v in values.items() if k != "resume" and BY_NAME[k].group not in _NOT_TRAINING}


def config_hash(values: dict[str, Any]) -> str:
    """A hash of the options that shape training (not saving, logging, samples or launch)."""
    text = json.dumps(_jsonable(_training_options(values)), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def changed_options(saved: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """'name: old -> new' for each training option that differs from the saved config."""
    now = _jsonable(_training_options(values))
    return [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in now.items() if k in saved and saved[k] != v]


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(values, default=str))
