"""Chroma: a FLUX.1-derived transformer with one T5-XXL text encoder."""
