"""Auto-captioning of a dataset folder as a job: a WD14-family ONNX tagger (onnxruntime) and natural-language
captioners (Florence-2, Qwen2.5-VL, JoyCaption, BLIP through transformers). `python -m trainers caption` runs one
headless; the Caption tab launches the same command. Masks for masked_loss (trainers/masks/) run the same way."""
