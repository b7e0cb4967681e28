"""How gradients and metrics are combined across workers: the one place that knows the strategy.

- SingleProcess: one worker, one device.
- Horovod (TensorFlow backend, under horovodrun): one process per GPU, pinned by local_rank; gradients averaged with
  horovod.tensorflow inside the train step (outside the XLA-compiled part: Horovod ops have no XLA kernel); initial
  variables broadcast from rank 0; metrics summed exactly across ranks.
- JaxDataParallel (JAX backend, one process, several local devices): keras.distribution.DataParallel replicates the
  variables; each batch is split over the devices and XLA inserts the gradient all-reduce inside the jitted step.

The rest of the code asks only `rank`, `world_size`, `is_chief`, `sum_across_workers`, `gather_rows` (the COCO
evaluator, metrics/coco.py), `average_variables` (batch-norm statistics before evaluating, loop.py), and (in steps.py) `average_gradients`, `broadcast_variables`, `shard_batch`,
`devices_per_worker`.
"""
from __future__ import annotations

import os

import numpy as np

from mlperf_keras.config import ConfigError

# Variables a launcher sets for each worker it starts: horovodrun (Gloo), Open MPI, MPICH/Slurm PMI.
_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
# ... and the number of them on this host.
_LAUNCHER_LOCAL_SIZE_VARS = ("HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def launched_workers() -> int:
    for var in _LAUNCHER_SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def local_workers() -> int:
    """Workers the launcher started on this host (1 without a launcher)."""
    for var in _LAUNCHER_LOCAL_SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


class SingleProcess:
    """One worker: every collective is the identity."""
    name = "single"
    rank = 0
    local_rank = 0
    world_size = 1
    devices_per_worker = 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    def sum_across_workers(self, values) -> np.ndarray:
        """Exact merge of per-worker counts (hits, totals): a sum, never an average of averages."""
        return np.asarray(values, dtype=np.float64)

    def gather_rows(self, array) -> np.ndarray:
        """Every worker's rows concatenated in rank order, the same on every worker (row counts may differ; the
        trailing shape and dtype may not). For results that are not sums, such as COCO detections."""
        array = np.asarray(array)
        if array.ndim == 0:
            raise ValueError("gather_rows needs an array with a leading row axis, got a scalar")
        return array

    def average_gradients(self, grads):
        return grads

    def broadcast_variables(self, variables):
        """Make every worker start from rank 0's initial values."""

    def average_variables(self, variables):
        """Replace each variable by its mean over the workers (batch-norm statistics before an evaluation)."""

    def shard_batch(self, batch):
        return batch

    def describe(self) -> str:
        return "single process"


class Horovod(SingleProcess):
    name = "horovod"

    def __init__(self):
        try:
            import horovod.tensorflow as hvd
        except ImportError as e:
            raise ConfigError(f"this process was started by a multi-worker launcher ({launched_workers()} workers) "
                              f"but horovod.tensorflow cannot be imported ({e}); build it with "
                              f"`bash scripts/install_horovod.sh` (see BUILD.md)") from None
        import tensorflow as tf

        hvd.init()
        self._hvd, self._tf = hvd, tf
        self.rank, self.local_rank, self.world_size = hvd.rank(), hvd.local_rank(), hvd.size()
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:  # one GPU per process; memory growth so a co-located process is never starved
            gpu = gpus[self.local_rank % len(gpus)]
            tf.config.set_visible_devices(gpu, "GPU")
            tf.config.experimental.set_memory_growth(gpu, True)

    def sum_across_workers(self, values) -> np.ndarray:
        tensor = self._tf.constant(np.asarray(values, dtype=np.float64))
        return self._hvd.allreduce(tensor, op=self._hvd.Sum).numpy()

    def gather_rows(self, array) -> np.ndarray:
        # allgather takes a different first dimension on each rank (zero rows included) and returns rank order.
        array = super().gather_rows(array)
        return self._hvd.allgather(self._tf.constant(array)).numpy()

    def average_variables(self, variables):
        for variable in variables:
            variable.assign(self._hvd.allreduce(variable.value, op=self._hvd.Average))

    def average_gradients(self, grads):
        # Embedding gradients arrive as IndexedSlices; a dense all-reduce is what NCF-sized tables want.
        dense = [self._tf.convert_to_tensor(g) for g in grads]
        return self._hvd.grouped_allreduce(dense, op=self._hvd.Average)

    def broadcast_variables(self, variables):
        # Keras 3 variables wrap the backend variable in .value; Horovod needs the tf.Variable itself.
        self._hvd.broadcast_variables([v.value for v in variables], root_rank=0)

    def describe(self) -> str:
        return f"horovod, {self.world_size} workers"


class JaxDataParallel(SingleProcess):
    name = "jax_data_parallel"

    def __init__(self, devices):
        import jax
        import keras

        self.devices_per_worker = len(devices)
        self.distribution = keras.distribution.DataParallel(devices=devices)
        keras.distribution.set_distribution(self.distribution)
        mesh = self.distribution.device_mesh.backend_mesh
        self._batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
        self._jax = jax

    def shard_batch(self, batch):
        """Split the leading (batch) axis of every array over the devices."""
        return self._jax.tree_util.tree_map(lambda a: self._jax.device_put(a, self._batch_sharding), batch)

    def describe(self) -> str:
        return f"jax DataParallel over {self.devices_per_worker} devices"


def create(backend: str):
    """The distribution for this process, from the backend and how it was launched."""
    workers = launched_workers()
    if workers > 1:
        if backend != "tensorflow":
            raise ConfigError(f"{workers} workers were launched, but multi-process training is built for the "
                              f"TensorFlow backend (Horovod); with JAX run one process, which uses every local GPU")
        return Horovod()
    if backend == "jax":
        import jax

        devices = jax.local_devices()
        if len(devices) > 1:
            return JaxDataParallel(devices)
    return SingleProcess()
