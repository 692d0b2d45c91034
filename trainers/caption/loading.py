"""Where a job's model comes from (a local folder, or a hub id downloaded once with its progress in the job's events)
and where it runs (device and precision)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.caption.options import JobConfig, model_source
from trainers.core.errors import ToolError
from trainers.core.job import JobFolder
from trainers.core.paths import is_hub_id


def model_folder(job: JobFolder, patterns: list[str] | None = None) -> Path:
    """The job's model as a local folder: the folder given, or the hub id's snapshot (only `patterns`' files),
    downloaded now unless the hub cache has it, its MiB counted in `download` progress events."""
    source = model_source(job.cfg)  # type: ignore[arg-type]
    local = Path(source).expanduser()
    if local.is_dir():
        return local
    if local.exists():
        raise ToolError("model", f"{local} is a file; give the model's folder (or a hub id)")
    if not is_hub_id(source):  # the page's check decides by the same function
        raise ToolError("model", f"{source} is neither a folder here nor a hub id (owner/name); check the path")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    from tqdm.auto import tqdm

    class Counted(tqdm):  # type: ignore[misc]
        """huggingface_hub's progress bars; the bytes written to disk are told to the page as download progress."""

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            if self.unit == "B" and not str(self.desc).startswith("Downloading bytes"):  # not the network's bar
                job.progress(f"download of {source} (MiB)", int(self.n) >> 20, int(self.total or self.n) >> 20)
            return shown

    try:
        return Path(snapshot_download(source, allow_patterns=patterns, tqdm_class=Counted))
    except LocalEntryNotFoundError:
        raise ToolError("model", f"{source} is not downloaded and the hub cannot be reached (offline, or "
                                 "HF_HUB_OFFLINE=1): download it once online, or give a local model folder") from None
    except (HfHubHTTPError, ValueError, OSError) as err:
        raise ToolError("model", f"{source} could not be downloaded ({err}); check the id (owner/name), your "
                                 "network, and for a gated model your HF_TOKEN") from None


def torch_device(cfg: JobConfig) -> Any:
    import torch

    wanted = str(cfg.device).strip().lower()
    if wanted == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if wanted.startswith("cuda") and not torch.cuda.is_available():
        raise ToolError("device", f"{wanted}: no CUDA GPU is visible here; choose cpu or auto")
    return torch.device(wanted)


def torch_dtype(cfg: JobConfig, device: Any) -> Any:
    import torch

    if cfg.precision != "auto":
        return {"float": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[cfg.precision]
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
