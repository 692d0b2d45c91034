"""musubi-tuner's training configs (its `--config_file` TOML of command-line options) read as Atelier's options."""
from trainers.adapters.musubi.options import is_musubi_file, read_musubi

__all__ = ["is_musubi_file", "read_musubi"]
