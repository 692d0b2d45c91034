"""Per-sample seeds: every random choice about a sample comes from (seed, epoch, index, stream).

Torch-free, so caption processing and the bucket order can use it in the GUI process too.
"""
from __future__ import annotations

import hashlib


def sample_seed(seed: int, epoch: int, index: int, stream: str) -> int:
    """A 63-bit seed owned by one sample of one epoch; `stream` separates independent uses."""
    digest = hashlib.blake2b(f"{seed}:{epoch}:{index}:{stream}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)
