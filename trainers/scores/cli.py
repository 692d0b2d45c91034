"""`python -m trainers scores <run dir>`: (re)score a run's saves from its sample images, as a run with score_saves
does after each sampling (scores.json, the saves' metadata); the score options default to the run's own."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from trainers.core.rundir import SCORES, read_run_config


def add_arguments(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("scores", help="score a run's saves from its samples and pick the best (docs/scores.md)")
    p.add_argument("run_dir", type=Path, help="the run folder (its config.toml and events.jsonl)")
    p.add_argument("--score-model", help="CLIP/SigLIP for prompt fidelity (default: the run's score_model)")
    p.add_argument("--likeness-model", help="model for likeness (default: the run's likeness_model)")
    p.add_argument("--rule", help="best_save_rule (default: the run's)")
    p.add_argument("--keep", action="store_true", help="keep the samplings scored already (default: score all)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when there is one)")
    p.set_defaults(job_main=main)


def main(args: argparse.Namespace) -> int:
    from trainers.core.options import load_config
    from trainers.data.catalog import build_catalog
    from trainers.scores.run import RunScorer, ScoreSettings

    run_dir = Path(args.run_dir)
    flat = read_run_config(run_dir)
    if flat is None:
        print(f"error: {run_dir} has no readable config.toml", file=sys.stderr)
        return 2
    cfg = load_config(str(flat.get("method", "lora")), run_dir / "config.toml")
    settings = ScoreSettings.of(cfg.values)
    settings = replace(settings, score_model=args.score_model or settings.score_model,
                       likeness_model=args.likeness_model if args.likeness_model is not None
                       else settings.likeness_model, rule=args.rule or settings.rule)
    catalog = build_catalog(cfg.values, [])
    images = [i.path for i in catalog.images if not catalog.subsets[i.subset].is_reg]
    if not args.keep:
        (run_dir / SCORES).unlink(missing_ok=True)
    device = args.device or _default_device()
    warnings: list[str] = []
    scorer = RunScorer(run_dir, settings, images, warnings.append, device=device)
    scorer.after_samples()
    best = scorer.finish()
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if scorer.off:
        return 1
    for record in scorer.records.values():
        print(f"step {record['step']:>7} epoch {record['epoch']:>3}  fidelity {record['fidelity']:.4f}  likeness "
              f"{record['likeness'] if record['likeness'] is None else round(record['likeness'], 4)}  "
              f"{Path(record['save']).name if record.get('save') else '(no save)'}")
    print(f"best save ({settings.rule}): {Path(best['save']).name if best and best.get('save') else 'none'}")
    print(f"written: {run_dir / SCORES}")
    return 0


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
