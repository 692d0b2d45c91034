"""Single-file checkpoints (.safetensors / .ckpt in the original LDM/SGM layout): read (`checkpoint`), load
(`load`), save (`save`), and the CLIP tokenizer they lack (`tokenizer`)."""
from trainers.models.single_file.checkpoint import SINGLE_FILE_SUFFIXES, Checkpoint, is_single_file, open_checkpoint
from trainers.models.single_file.load import build_components, detect_checkpoint_family, load_single_file
from trainers.models.single_file.save import (
                                              SAVE_DTYPES,
                                              original_layout,
                                              save_diffusers_folder,
                                              save_full_model,
                                              single_file_metadata,
                                              single_file_state_dict,
)
from trainers.models.single_file.tokenizer import clip_tokenizer, clip_vocabulary, folder_tokenizer

__all__ = ["SAVE_DTYPES", "SINGLE_FILE_SUFFIXES", "Checkpoint", "build_components", "clip_tokenizer", "clip_vocabulary",
           "detect_checkpoint_family", "folder_tokenizer", "is_single_file", "load_single_file", "open_checkpoint",
           "original_layout", "save_diffusers_folder", "save_full_model", "single_file_metadata",
           "single_file_state_dict"]
