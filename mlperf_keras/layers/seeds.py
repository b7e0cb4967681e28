"""Integer seeds for the parts of a model, derived from the run's seed.

Keras 3 initializers and dropout layers given the same int seed draw the same numbers, so every part needs its own.
`seed + k` gives that within one run but not across runs: part k of the run with seed s+1 would draw exactly what
part k+1 of the run with seed s drew (runs of consecutive seeds, as a sweep makes them, would share whole weight
tensors). A SeedSequence hash of (seed, path) gives every part of every run its own seed.
"""
from __future__ import annotations

import numpy as np


def derive_seed(seed: int | None, *path: int) -> int | None:
    """The seed of the model part at `path` (e.g. layer index, then weight index); None stays None (unseeded)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), *(int(p) for p in path)]).generate_state(1)[0] & 0x7FFFFFFF)
