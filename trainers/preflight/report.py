"""The preflight report: what a run would train on, before it starts, with every check of its config. Torch-free
(the GUI's Validate calls it; `python -m trainers preflight` prints it).

    report = preflight(cfg, num_processes=2)
    report.ok, report.errors, report.warnings, report.steps_per_epoch, report.total_steps
    print(report.text())          # or report.to_dict() for JSON
"""
from __future__ import annotations

from pathlib import Path

from trainers.core.options import ConfigError, ConfigIssue, TrainConfig
from trainers.core.weights_memory import weights_note
from trainers.data.catalog import build_catalog
from trainers.data.kohya_folders import DatasetLayoutError
from trainers.data.report import PreflightReport, fill_report
from trainers.models.video_data import is_video_run, video_run_catalog
from trainers.models.distilled import distilled_notes
from trainers.models.edit_rules import takes_controls
from trainers.preflight.validate import planned_save_issues, validate


def preflight(cfg: TrainConfig, num_processes: int | None = None) -> PreflightReport:
    """Check the config and read the dataset as a run on `num_processes` processes would; never raises.

    `num_processes` defaults to the config's launch options (num_processes x num_machines) when it has them.
    """
    if num_processes is None:
        num_processes = int(cfg.values.get("num_processes") or 1) * int(cfg.values.get("num_machines") or 1)
    report = PreflightReport(num_processes, errors=validate(cfg), memory=weights_note(cfg))
    report.warnings += distilled_notes(cfg.values)  # the handling chosen for a distilled base
    named = {issue.field for issue in report.errors}
    try:  # read even with option errors, so that the dataset's own problems are named in the same pass
        catalog = (video_run_catalog(cfg.values, report.warnings) if is_video_run(cfg.values) else
                   build_catalog(cfg.values, report.warnings, takes_controls(cfg.values)))
    except ConfigError as err:
        report.errors += [issue for issue in err.issues if issue.field not in named]
        return report
    except DatasetLayoutError as err:
        if err.field not in named:
            report.errors.append(ConfigIssue(err.field, str(err), "dataset"))
        return report
    except (ValueError, TypeError, OSError):
        if not any(issue.group == "dataset" for issue in report.errors):
            raise
        report.warnings.append("the dataset is read once the dataset errors are fixed")
        return report
    fill_report(report, catalog, cfg)
    if report.plan is not None:  # the step and epoch saves it plans must not replace files it did not write
        report.errors += [issue for issue in planned_save_issues(cfg, report.plan) if issue.field not in named]
    return report


def run_preflight(method: str, config: Path | None, overrides: list[str], num_processes: int | None,
                  as_json: bool) -> int:
    """`python -m trainers preflight`: print the report; exit 0 when the run can start, 2 when it lists errors.

    Loads no model (nor torch).
    """
    import json

    from trainers.core.errors import EXIT_BAD_INPUT
    from trainers.core.options import load_config

    warnings: list[str] = []
    try:
        cfg = load_config(method, config, overrides, warnings)
    except ConfigError as err:
        report = PreflightReport(num_processes or 1, errors=err.issues, warnings=warnings)
    else:
        report = preflight(cfg, num_processes)
        report.warnings[:0] = warnings
    print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False) if as_json else report.text())
    return 0 if report.ok else EXIT_BAD_INPUT

