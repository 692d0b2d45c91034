"""The one rule for the paths a form or job takes: each must lie under the allowed roots (--allowed-root, or those
of an exposed GUI; symlinks and `..` resolved), and so must the folders and images named inside the files a form
names (a dataset_config's subsets, an in_json's images). A model option's text is a hub id only when it cannot be a
local path (trainers.core.paths.is_hub_id, which the loaders decide by too), and while paths are confined a hub id is
taken only with --allow-hub-models: it downloads into this machine's cache with its token, and a caption model's
trust_remote_code runs the repository's code.

Each tab only gathers its paths (`option_paths`, plus what is particular to it) and asks `paths_outside`. Torch-free.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.core.errors import ConfigIssue
from trainers.core.options import BY_NAME, TrainConfig
from trainers.core.options.schema import Option
from trainers.core.paths import is_hub_id, shortened, text_problem

if TYPE_CHECKING:
    from trainers.data.specs import SubsetSpec

HUB_FLAG = "--allow-hub-models"
MOST_NAMED = 5  # paths named inside one form's files that are refused one by one


class AllowedRoots(list):
    """The folders paths must lie under (resolved), and whether a model may be a hub id meanwhile (HUB_FLAG)."""

    def __init__(self, folders: Iterable[Path], hub_models: bool = False) -> None:
        super().__init__(folders)
        self.hub_models = hub_models


@dataclass(frozen=True)
class TypedPath:
    field: str
    text: str
    group: str
    may_be_hub_id: bool = False  # a model option: text that cannot be a local path is a hub id
    named_in: str = ""  # the file that names this path (a dataset_config, an in_json), for the message


def option_paths(options: Iterable[Option], values: Mapping[str, Any],
                 hub_options: Iterable[str] = ()) -> list[TypedPath]:
    """The paths `values` gives the options that declare a path kind (each line of a list option); those named in
    `hub_options` may be hub ids."""
    hub = set(hub_options)
    typed = []
    for opt in options:
        if not opt.path or opt.name not in values:
            continue
        given = values[opt.name]
        for text in (given if isinstance(given, (list, tuple)) else [given or ""]):
            typed.append(TypedPath(opt.name, str(text), opt.group, opt.name in hub))
    return typed


def paths_outside(typed: list[TypedPath], roots: list[Path] | None) -> list[ConfigIssue]:
    """An issue for each typed path that names no path at all (a NUL, too long: any filesystem call would raise), or
    lies outside every root (None: anywhere is fine). Run before the checks that look at the paths."""
    issues = []
    for item in typed:
        problem = _problem(item, roots)
        if problem:
            where = f"{item.named_in} names " if item.named_in else ""
            issues.append(ConfigIssue(item.field, where + problem, item.group))
    return issues


def _problem(item: TypedPath, roots: list[Path] | None) -> str | None:
    text = item.text.strip()
    if not text:
        return None
    unusable = text_problem(text)
    if unusable:
        return f"the path {unusable}"
    if roots is None:
        return None
    shown = ", ".join(str(r) for r in roots)
    if item.may_be_hub_id and is_hub_id(text):
        if getattr(roots, "hub_models", False):
            return None
        return (f"{text} is not a folder or file here, so it would be fetched from the hub as a model; this GUI takes "
                f"local models under {shown} only: the admin can allow hub models with {HUB_FLAG}")
    try:
        path = Path(text).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as err:  # a loop of links, ~name of no user
        return f"{shortened(text)} cannot be used as a path ({err})"
    if any(path == root or root in path.parents for root in roots):
        return None
    return (f"{shortened(text)} is outside the folders this GUI may use ({shown}); the admin can add one with "
            "--allowed-root")


def outside_roots(cfg: TrainConfig, roots: list[Path] | None) -> list[ConfigIssue]:
    """The training form's path options, and then what its dataset_config and in_json name (read only once those
    files themselves are allowed)."""
    hub = [name for name in cfg.values if name in BY_NAME and BY_NAME[name].path == "any"]
    typed = option_paths((BY_NAME[name] for name in cfg.values if name in BY_NAME), cfg.values, hub)
    resume = str(cfg.values.get("resume") or "").strip()
    if resume.lower() != "latest":  # 'latest' lies in output_dir, checked as its own option
        typed.append(TypedPath("resume", resume, "saving"))
    issues = paths_outside(typed, roots)
    if roots is None:
        return issues
    refused = {issue.field for issue in issues}
    inside = paths_outside(dataset_paths(cfg.values, refused, roots), roots)
    if len(inside) > MOST_NAMED:  # an in_json of thousands of images outside: the first few say it
        inside = inside[:MOST_NAMED] + [ConfigIssue(inside[0].field, f"and {len(inside) - MOST_NAMED} more paths "
                                                    "outside the folders this GUI may use", "dataset")]
    return issues + inside


def dataset_paths(values: Mapping[str, Any], refused: set[str], roots: list[Path]) -> list[TypedPath]:
    """The folders a dataset_config's subsets name, and the images an in_json, metadata_file or metadata_dir names.
    Nothing is read that is not allowed itself (a refused dataset_config, a metadata file or folder outside the
    roots). A file that cannot be read is named by the dataset check."""
    from trainers.data.dataset_toml import dataset_specs
    from trainers.models.edit_rules import takes_controls

    config = str(values.get("dataset_config") or "").strip()
    if config and "dataset_config" in refused:
        return []
    try:
        specs = dataset_specs(values, [], takes_controls(values))
    except Exception:  # noqa: BLE001 - any reader error; the preflight names it in its own words
        return []
    typed = []
    for sub in (sub for spec in specs for sub in spec.subsets):
        field = "dataset_config" if config else sub.field
        if config:  # a flat config's folders are options, checked as such
            named_in = f"{Path(config).name} ({sub.label or sub.field})"
            typed += [TypedPath(field, str(p), "dataset", named_in=named_in)
                      for p in (sub.path, sub.masks, sub.controls, sub.metadata_file) if p is not None]
        elif sub.field in refused:
            continue
        typed += [TypedPath(field, str(image), "dataset", named_in=source)
                  for image, source in _named_images(sub, roots)]
    return typed


def _named_images(sub: SubsetSpec, roots: list[Path]) -> list[tuple[Path, str]]:
    """(image, the file naming it) for the images a subset's metadata names: an in_json or metadata_file's keys, the
    paths in a metadata_dir's JSON files; read only from inside the roots."""
    from trainers.data.metadata_file import named_images
    from trainers.data.metadata_json import scan_metadata_dir

    def allowed(path: Path) -> bool:
        return _problem(TypedPath("", str(path), ""), roots) is None

    try:
        if sub.metadata_file is not None and allowed(sub.metadata_file) and sub.metadata_file.is_file():
            return [(image, sub.metadata_file.name) for image in named_images(sub.metadata_file, sub.path, sub.field)]
        if sub.kind == "metadata" and sub.metadata is not None and allowed(sub.path):
            return [(record.image, record.source.name) for record in scan_metadata_dir(sub.path, sub.metadata).records]
    except Exception:  # noqa: BLE001 - as above
        pass
    return []
