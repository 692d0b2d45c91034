"""The option schema and everything derived from it: TOML load/save, overrides, validation."""
from trainers.core.options.loading import TrainConfig, config_from_dict, load_config, parse_set
from trainers.core.options.training import BY_NAME, OPTIONS, options_for
from trainers.core.options.schema import GROUPS, ConfigError, ConfigIssue, Option
from trainers.core.options.validation import check, final_output_file, output_suffix, parse_key_values, parse_resolution, validate

__all__ = [
    "BY_NAME", "GROUPS", "OPTIONS", "ConfigError", "ConfigIssue", "Option", "TrainConfig", "check",
    "config_from_dict", "final_output_file", "load_config", "options_for", "output_suffix", "parse_key_values", "parse_resolution",
    "parse_set", "validate",
]
