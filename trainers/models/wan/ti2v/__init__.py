"""Wan 2.2 TI2V 5B: one 5B transformer over the 48-channel, 16x Wan 2.2 autoencoder (WanPipeline with
expand_timesteps), trained as text-to-video."""
