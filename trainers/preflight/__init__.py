"""The Validate orchestrator, above what it orchestrates: the options' checks (trainers/core/options), the dataset's
(trainers/data), the model's files' (trainers/models/checks.py) and each method's rules (trainers/methods).

- `validate.py`: every problem of a config (`validate`, `check`), torch-free. The GUI's Validate, `--print-config`,
  `python -m trainers preflight` and the trainer's start run it; the trainer before torch, diffusers or accelerate
  load (trainers/__main__.py hands `check` to trainers/train/run.py).
- `report.py`: the preflight report, those checks plus what the dataset holds (`preflight`, `run_preflight`).
"""
