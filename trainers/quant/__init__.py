"""Quantized frozen weights: `rules` checks the options without torch; `apply` quantizes a loaded model's frozen
denoiser and text encoders (torchao for int8, int4 and fp8 weight-only; bitsandbytes for nf4; diffusers' layerwise
casting for fp8 storage of every layer)."""
