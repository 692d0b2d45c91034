"""HiDream-I1 (Full, Dev, Fast): a dual- and single-stream MoE transformer over 2x2 patches of FLUX.1's 16-channel
latents, with CLIP-L, CLIP-G, T5-XXL and Llama-3.1-8B-Instruct text encoders."""
