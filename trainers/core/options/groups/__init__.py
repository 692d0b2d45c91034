"""The training options, one module per group (its TOML section and GUI group)."""
