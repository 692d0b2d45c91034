"""Wan 2.1 text-to-video (diffusers WanTransformer3DModel, WanPipeline): the first video family."""
