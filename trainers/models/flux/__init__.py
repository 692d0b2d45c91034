"""FLUX.1 dev and schnell (`family.py`: FLUX; `tiny.py`: a tiny random-init FLUX for tests)."""
