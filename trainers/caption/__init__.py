"""Jobs over a dataset's images, one package: auto-captioning and loss masks.

Captions: a WD14-family ONNX tagger (onnxruntime) and natural-language captioners (Florence-2, Qwen2.5-VL,
JoyCaption, BLIP through transformers). `python -m trainers caption` runs one headless; the Caption tab launches the
same command.

Masks for masked_loss (`python -m trainers masks`, mask_options.py, masks.py): made by a segmentation model, CLIPSeg
by a text prompt, or a background-removal model. Masks are grey images in a folder laid out like the images' folder
(mask_layout.py), which training reads as `conditioning_data_dir` (sd-scripts' meaning); the images are never
changed. Both run through the same loop (job.py), model loading (loading.py) and events (events.py)."""
