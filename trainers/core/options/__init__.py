"""The option schema and everything derived from it: TOML load/save (with migrations), overrides, option checks."""
from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options.loading import TrainConfig, config_from_dict, load_config, parse_set
from trainers.core.options.schema import Option
from trainers.core.options.training import BY_NAME, GROUPS, OPTIONS, options_for
from trainers.core.options.validation import parse_key_values, parse_resolution

__all__ = [
    "BY_NAME", "GROUPS", "OPTIONS", "ConfigError", "ConfigIssue", "Option", "TrainConfig", "config_from_dict",
    "load_config", "options_for", "parse_key_values", "parse_resolution", "parse_set",
]
