"""Ideogram 4: a single-stream transformer over 2x2 patches of FLUX.2's 32-channel latents, reading 13 hidden layers
of a Qwen3-VL 8B text encoder, sampled with a second (unconditional) transformer for its guidance."""
