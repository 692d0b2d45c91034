"""`python -m trainers <method> --config X --print-config [--export-sd-scripts OUT.toml]` (torch-free).

Prints the resolved config, then what a run would say before it loads a model: the warnings (translated or
ignored keys, optimizer advice, dataset notes) and the errors (option, dataset, method and model checks, the same
ones the GUI's Validate shows and the run refuses a config for). Exits 2 when a run would refuse the config.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from trainers.core.errors import EXIT_BAD_INPUT, ConfigError, ConfigIssue
from trainers.core.fsio import atomic_write_text
from trainers.core.options import TrainConfig, load_config


def comment_lines(kind: str, text: str) -> list[str]:
    """One `# kind: ...` line, and `#   ...` for the lines of a multi-line message."""
    first, *rest = text.splitlines() or [""]
    return [f"# {kind}: {first}"] + [f"#   {line}" for line in rest]


def report_lines(warnings: list[str], errors: list[ConfigIssue]) -> list[str]:
    lines = [f"# --- a run would say (before loading the model): {len(errors)} error(s), {len(warnings)} warning(s)"]
    for warning in warnings:
        lines += comment_lines("warning", warning)
    for issue in errors:
        lines += comment_lines("error", str(issue))
    return lines


def check_config(method: str, config: Path | None, overrides: list[str]) -> tuple[TrainConfig | None, list[str],
                                                                               list[ConfigIssue], str]:
    """(config or None, warnings, errors, the memory estimate's line) as a run would find them, without loading a
    model."""
    from trainers.memory_estimate import memory_report
    from trainers.core.options.optimizer_checks import optimizer_warnings
    from trainers.preflight.report import preflight

    warnings: list[str] = []
    try:
        cfg = load_config(method, config, overrides, warnings)
    except ConfigError as err:
        return None, warnings, err.issues, ""
    report = preflight(cfg)
    memory, too_big = memory_report(cfg)
    warnings += [w for w in optimizer_warnings(cfg) + report.warnings + too_big if w not in warnings]
    return cfg, warnings, report.errors, memory or report.memory


def print_config(method: str, config: Path | None, overrides: list[str], export: Path | None = None,
                 out: TextIO | None = None) -> int:
    """The resolved config and its report on `out` (stdout); 0 when a run could start, 2 when it would refuse."""
    out = out or sys.stdout
    cfg, warnings, errors, memory = check_config(method, config, overrides)
    if cfg is not None:
        print(cfg.to_toml().rstrip("\n"), file=out)
    print("\n".join(report_lines(warnings, errors)), file=out)
    if memory:
        print("\n".join(comment_lines("memory", memory)), file=out)
    if cfg is not None and export is not None:
        for line in export_sd_scripts(cfg, export):
            print(line, file=out)
    return EXIT_BAD_INPUT if errors else 0


def export_sd_scripts(cfg: TrainConfig, path: Path) -> list[str]:
    """Write `path` (the sd-scripts --config_file) and, with sample_prompt_lines, its prompts file; return the lines
    to show: the command and the notes, as comments."""
    import shlex

    from trainers.adapters.kohya.export import prompt_file_lines, sd_scripts_command

    path = Path(path)
    prompts = path.with_suffix(".prompts.txt")
    argv, text, notes = sd_scripts_command(cfg, family=_family(cfg), config_path=str(path),
                                           prompts_path=str(prompts))
    atomic_write_text(path, text)
    if cfg.values.get("sample_prompt_lines") and not cfg.values.get("sample_prompts"):
        atomic_write_text(prompts, "\n".join(prompt_file_lines(cfg)) + "\n")
    lines = [f"# --- sd-scripts: wrote {path}; run it from sd-scripts' folder with:", "# " + shlex.join(argv)]
    for note in notes:
        lines += comment_lines("not exported", note)
    return lines


def _family(cfg: TrainConfig) -> str | None:
    """The model family: the option, or read from a local model (None when it cannot be told)."""
    if cfg.model_family != "auto":
        return cfg.model_family
    from trainers.models.checks import local_family

    return local_family(cfg.pretrained_model_name_or_path)
