"""FLUX.1 Kontext: FLUX.1's options and an edit model's (torch-free; see trainers/core/options/families.py). Its
single files are read as FLUX.1's."""
from __future__ import annotations

from trainers.models.flux.options import NOTES as FLUX_NOTES
from trainers.models.flux.options import READS as FLUX_READS
from trainers.models.option_sets import DISTILLED, EDIT, EDIT_NOTES, SINGLE_FILE

READS = (FLUX_READS - SINGLE_FILE - DISTILLED - {"clip_l", "t5xxl", "ae"}) | EDIT
NOTES = {**{k: v for k, v in FLUX_NOTES.items() if k not in ("ae", "tokenizer_cache_dir")}, **EDIT_NOTES}
