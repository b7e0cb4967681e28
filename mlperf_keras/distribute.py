"""How gradients and metrics are combined across workers: the one place that knows the strategy.

The rest of the code asks only `rank`, `world_size`, `is_chief`, `sum_across_workers` and (inside the train step)
`average_gradients` / `broadcast_variables`. Single process is built here; Horovod (TensorFlow backend) and
keras.distribution.DataParallel (JAX backend) plug in behind the same interface.
"""
from __future__ import annotations

import numpy as np


class SingleProcess:
    """One worker: every collective is the identity."""
    name = "single"
    rank = 0
    local_rank = 0
    world_size = 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def sum_across_workers(self, values) -> np.ndarray:
        """Exact merge of per-worker counts (hits, totals): a sum, never an average of averages."""
        return np.asarray(values, dtype=np.float64)

    def average_gradients(self, grads):
        return grads

    def broadcast_variables(self, variables):
        """Make every worker start from rank 0's initial values."""

    def describe(self) -> str:
        return "single process"


def create(backend: str):
    """The distribution for this process. Multi-worker strategies arrive with the data-parallel work (issue 3)."""
    del backend
    return SingleProcess()
