"""ERNIE-Image (Baidu; ERNIE-Image and its distilled Turbo): a single-stream transformer over 2x2 patches of FLUX.2's
32-channel latents, read by a Ministral 3 (Mistral3Model) text encoder."""
