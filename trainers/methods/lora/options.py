"""LoRA's declarations (torch-free). Its network options are shared by every method that trains a network
(trainers/core/options/groups/network.py); here is what is LoRA's alone."""
from __future__ import annotations

SD_SCRIPTS: dict[str, str] = {"sd1": "train_network.py", "sd2": "train_network.py", "sdxl": "sdxl_train_network.py",
                              "sd3": "sd3_train_network.py", "flux": "flux_train_network.py"}
