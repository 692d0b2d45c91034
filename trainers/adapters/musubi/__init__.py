"""musubi-tuner's training configs (its `--config_file` TOML of command-line options) read as Atelier's options: a
config adapter (trainers/core/registry.py CONFIG_ADAPTERS)."""
from trainers.adapters.musubi.options import is_musubi_file as claims
from trainers.adapters.musubi.options import read_musubi as read

__all__ = ["claims", "read"]
