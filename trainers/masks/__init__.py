"""Loss masks for masked_loss, made by a segmentation model as a job (`python -m trainers masks`): CLIPSeg by a
text prompt, or a background-removal model. Masks are grey images in a folder laid out like the images' folder, which
training reads as `conditioning_data_dir` (sd-scripts' meaning); the images are never changed."""
