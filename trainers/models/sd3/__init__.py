"""SD3 and SD3.5 (`family.py`: SD3; `tiny.py`: a tiny random-init SD3.5-medium-like model for tests)."""
