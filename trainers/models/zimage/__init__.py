"""Z-Image (Turbo and Base): a single-stream transformer with a Qwen3 text encoder."""
