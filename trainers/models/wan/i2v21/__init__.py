"""Wan 2.1 image-to-video 14B: WanImageToVideoPipeline with one transformer and a CLIP image encoder."""
