"""Finetune's declarations (torch-free). Its options are the full-weight ones every such method shares
(trainers/core/options/groups/full_weights.py)."""
from __future__ import annotations

SD_SCRIPTS: dict[str, str] = {"sd1": "fine_tune.py", "sd2": "fine_tune.py", "sdxl": "sdxl_train.py",
                              "sd3": "sd3_train.py", "flux": "flux_train.py",
                              "chroma": "flux_train.py", "lumina2": "lumina_train.py", "anima": "anima_train.py"}
