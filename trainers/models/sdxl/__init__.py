"""SDXL (`family.py`: SDXL; `tiny.py`: a tiny random-init SDXL for tests)."""
