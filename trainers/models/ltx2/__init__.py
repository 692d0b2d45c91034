"""LTX-2 text-to-video, the video stream of its audio-video transformer (diffusers LTX2VideoTransformer3DModel,
LTX2Pipeline); its audio stream is frozen."""
