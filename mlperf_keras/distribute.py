"""How gradients and metrics are combined across workers: the one place that knows the strategy.

- SingleProcess: one worker, one device.
- Horovod (TensorFlow backend, under horovodrun): one process per GPU, pinned by local_rank; gradients averaged with
  horovod.tensorflow inside the train step (outside the XLA-compiled part: Horovod ops have no XLA kernel); initial
  variables broadcast from rank 0; metrics summed exactly across ranks.
- JaxDataParallel (JAX backend): data parallel over the mesh of keras.distribution.DataParallel; the train step's state
  is replicated on every device, each batch is split over them and XLA inserts the gradient all-reduce inside the
  jitted step. One process uses its local devices (and sets the distribution, which replicates the Keras variables);
  several processes (one per host, or one per GPU under srun/mpirun) join through jax.distributed first, each feeding
  its own share of the global batch, and replicate only the step's state (JaxDataParallel.__init__ says why).

The rest of the code asks only `rank`, `world_size`, `is_chief`, `sum_across_workers`, `gather_rows` (the COCO
evaluator, metrics/coco.py), `average_variables` (batch-norm statistics before evaluating, loop.py), and (in
steps.py) `average_gradients`, `broadcast_variables`, `shard_batch`, `replicate` and `local_replica` (JAX: the step's state
over every process's devices, and over this process's for predict), and `devices_per_worker`.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys

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

    def from_chief(self, value: int) -> int:
        """Rank 0's value of an integer every worker drew for itself (the run's seed when none was given)."""
        return value

    def average_variables(self, variables):
        """Replace each variable by its mean over the workers (batch-norm statistics before an evaluation)."""

    def shard_batch(self, batch):
        return batch

    def replicate(self, value):
        """A value that is the same on every worker as the train step's state takes it (JAX: see JaxDataParallel)."""
        return value

    def local_replica(self, value):
        """The value as a computation of this worker alone takes it (JAX: see JaxDataParallel)."""
        return value

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

    def from_chief(self, value: int) -> int:
        return int(self._hvd.broadcast(self._tf.constant(value, self._tf.int64), root_rank=0).numpy())

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


# jax.distributed's failure detection. A process whose heartbeats stop for HEARTBEAT_TIMEOUT_SECONDS is declared dead
# and every survivor is terminated by JAX (a collective that fails at once, as Gloo's does on a closed socket, ends the
# run sooner: the loop logs run_stop aborted). Heartbeats come from a thread of their own, so compilation, evaluation
# or a checkpoint write on one process do not count; only a process that is gone or frozen does. 60 s is well above
# any stall of a live host and bounds how long a job whose collective hangs on a dead peer (NCCL) holds its GPUs.
HEARTBEAT_TIMEOUT_SECONDS = 60
# How long a process waits for the others at exit (the chief writes the final checkpoint and closes the log last)
# and, at start, for all of them to connect (hosts that boot or import at different speeds).
SHUTDOWN_TIMEOUT_SECONDS = 300
INITIALIZATION_TIMEOUT_SECONDS = 300

# The variables by which srun (jax's SLURM detection needs all of them) and Open MPI's mpirun start a process.
_SLURM_STEP_VARS = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
_OPEN_MPI_VAR = "OMPI_MCA_orte_hnp_uri"


class JaxDataParallel(SingleProcess):
    """keras.distribution.DataParallel over every device of every JAX process (one process: its local devices)."""
    name = "jax_data_parallel"

    def __init__(self, devices=None):
        import jax
        import keras

        self._jax = jax
        self.rank, self.world_size = jax.process_index(), jax.process_count()
        self.local_rank = _launcher_local_rank()
        devices = list(devices if devices is not None else jax.devices())
        self.devices_per_worker = sum(d.process_index == self.rank for d in devices)
        self.distribution = keras.distribution.DataParallel(devices=devices)
        mesh = self.distribution.device_mesh.backend_mesh
        self._batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
        self._replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        if self.world_size == 1:
            keras.distribution.set_distribution(self.distribution)
        else:
            # Gloo connects the processes at their first collective and gives up after a fixed wait; here they are
            # together (jax.distributed.initialize returned on all), whereas the run's first collective
            # (broadcast_variables) comes after each has built its model, which can be far apart (seen in a test
            # whose second process built a smaller model: "Gloo context initialization failed ... timed out
            # connecting").
            self._allgather(np.zeros(1, np.uint8))
        # With several processes Keras variables stay on this process's devices and the train step's state is
        # replicated over every process's (replicate()): a Keras variable created under the distribution is a
        # device_put onto all processes' devices, which JAX refuses unless its value is the same in each, and the
        # input layer's per-worker random streams (keras.random.SeedGenerator of the run's seed and the rank) are
        # variables that differ by design.

    def shard_batch(self, batch):
        """Split the leading (batch) axis of every array over the devices; with several processes each gives its own
        rows and the result is the global batch (an array that already is one, such as a synthetic batch put on the
        devices once, is left as it is)."""
        jax = self._jax
        if self.world_size == 1:
            return jax.tree_util.tree_map(lambda a: jax.device_put(a, self._batch_sharding), batch)

        def global_array(a):
            if isinstance(a, jax.Array) and not a.is_fully_addressable:
                return a
            return jax.make_array_from_process_local_data(self._batch_sharding, a)
        return jax.tree_util.tree_map(global_array, batch)

    def replicate(self, value):
        """A value that is the same in every process (the train step's state) as one array replicated over every
        process's devices."""
        jax = self._jax
        if self.world_size == 1 or (isinstance(value, jax.Array) and not value.is_fully_addressable):
            return value
        copies = [jax.device_put(value, device) for device in self._replicated.addressable_devices]
        return jax.make_array_from_single_device_arrays(np.shape(value), self._replicated, copies)

    def local_replica(self, value):
        """A replicated array over every process as an array over this process's devices only: what a computation
        of this process alone (its share of an evaluation) takes, without a collective with the others."""
        jax = self._jax
        if self.world_size == 1 or not isinstance(value, jax.Array) or value.is_fully_addressable:
            return value
        if not value.is_fully_replicated:
            raise ValueError(f"local_replica needs a replicated array, got one sharded as {value.sharding}")
        shards = value.addressable_shards
        local_mesh = jax.sharding.Mesh(np.array([s.device for s in shards]), ("replica",))
        return jax.make_array_from_single_device_arrays(
            value.shape, jax.sharding.NamedSharding(local_mesh, jax.sharding.PartitionSpec()), [s.data for s in shards])

    def _allgather(self, array: np.ndarray) -> np.ndarray:
        """Each process's array (same shape and dtype everywhere) stacked in rank order, bit for bit: sent as bytes,
        since JAX without x64 would turn float64 counts and int64 ids into 32-bit values."""
        from jax.experimental import multihost_utils

        array = np.ascontiguousarray(array)
        gathered = np.asarray(multihost_utils.process_allgather(array.reshape(-1).view(np.uint8)))
        return gathered.view(array.dtype).reshape((self.world_size, *array.shape))

    def sum_across_workers(self, values) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        if self.world_size == 1:
            return values
        return self._allgather(values).sum(axis=0)

    def gather_rows(self, array) -> np.ndarray:
        array = super().gather_rows(array)
        if self.world_size == 1:
            return array
        # process_allgather needs one shape everywhere: gather the row counts, pad to the longest, gather, cut.
        counts = self._allgather(np.array([array.shape[0]], np.int64))[:, 0]
        if counts.max() == 0:
            return array
        padded = np.zeros((int(counts.max()), *array.shape[1:]), array.dtype)
        padded[:array.shape[0]] = array
        gathered = self._allgather(padded)
        return np.concatenate([rows[:count] for rows, count in zip(gathered, counts)])

    def broadcast_variables(self, variables):
        """Process 0's initial values in every process's variables (each initialised its own, from its own seed)."""
        if self.world_size == 1:
            return
        from jax.experimental import multihost_utils

        local = [np.asarray(v.value) for v in variables]
        for variable, value in zip(variables, multihost_utils.broadcast_one_to_all(local)):
            variable.assign(np.asarray(value))

    def from_chief(self, value: int) -> int:
        if self.world_size == 1:
            return value
        return int(self._allgather(np.array([value], np.int64))[0, 0])

    def describe(self) -> str:
        if self.world_size == 1:
            return f"jax DataParallel over {self.devices_per_worker} devices"
        return (f"jax DataParallel over {self._jax.device_count()} devices in {self.world_size} processes "
                f"(jax.distributed)")


def _launcher_local_rank() -> int:
    for var in ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _jax_cluster_launched() -> bool:
    """Was this process started by a launcher whose environment jax.distributed reads (srun, Open MPI's mpirun) as
    one of several?"""
    if all(var in os.environ for var in _SLURM_STEP_VARS):
        return os.environ["SLURM_NTASKS"].isdigit() and int(os.environ["SLURM_NTASKS"]) > 1
    return _OPEN_MPI_VAR in os.environ and launched_workers() > 1


def start_jax_distributed(coordinator_address=None, num_processes=None, process_id=None) -> None:
    """jax.distributed.initialize with this project's timeouts, from the arguments or, where they are not given,
    JAX_COORDINATOR_ADDRESS and jax's SLURM / Open MPI detection."""
    import jax

    # Cross-process collectives of CPU devices (a CPU-only job, and process_allgather of host values) need Gloo;
    # GPU devices use NCCL whatever this says.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # The preemption service takes SIGTERM for itself (it logs "SIGTERM caught" and the process runs on): a launcher
    # that ends the job would then leave a log without run_stop. train.py's own handler exits through the loop.
    jax.config.update("jax_enable_preemption_service", False)
    # Its INFO lines (service started, connecting, preemption service disabled) would open every run's output.
    logging.getLogger("jax._src.distributed").setLevel(logging.WARNING)
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                   initialization_timeout=INITIALIZATION_TIMEOUT_SECONDS,
                                   heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_SECONDS,
                                   shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_SECONDS)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"cannot start jax.distributed: {e} (give --coordinator_address=HOST:PORT of process 0, "
                          f"--num_processes and --process_id, or start the processes with srun or mpirun)") from None
    # Registered after jax's own exit hook, so it runs first. A process that ends in an uncaught exception (a
    # collective that failed because another process died: the loop has logged run_stop aborted) would otherwise
    # wait in jax.distributed's shutdown barrier for the dead process until the heartbeat timeout, then abort.
    atexit.register(_exit_now_after_uncaught_exception)


def _exit_now_after_uncaught_exception():
    if getattr(sys, "last_value", None) is not None:   # set by the interpreter for the exception it just printed
        sys.stderr.flush()
        os._exit(1)


def create(backend: str, coordinator_address: str | None = None, num_processes: int | None = None,
           process_id: int | None = None):
    """The distribution for this process, from the backend and how it was launched.

    On JAX, coordinator_address / num_processes / process_id (train.py's flags), JAX_COORDINATOR_ADDRESS, or srun /
    mpirun start jax.distributed and the processes train as one; without them a process uses its local devices."""
    explicit = [value is not None for value in (coordinator_address, num_processes, process_id)]
    if backend != "jax":
        if any(explicit):
            raise ConfigError("--coordinator_address, --num_processes and --process_id start jax.distributed: they "
                              "need --backend=jax (the TensorFlow backend spans hosts through horovodrun)")
        if launched_workers() > 1:
            return Horovod()
        return SingleProcess()
    if any(explicit) and not all(explicit):
        raise ConfigError("--coordinator_address, --num_processes and --process_id go together (or none of them, "
                          "under srun or mpirun)")
    if all(explicit) and not 0 <= process_id < num_processes:
        raise ConfigError(f"--process_id={process_id} must be in [0, --num_processes={num_processes})")
    if all(explicit) or os.environ.get("JAX_COORDINATOR_ADDRESS") or _jax_cluster_launched():
        start_jax_distributed(coordinator_address, num_processes, process_id)
        return JaxDataParallel()
    if launched_workers() > 1:
        raise ConfigError(f"{launched_workers()} workers were launched by a launcher jax.distributed cannot join "
                          f"(horovodrun starts TensorFlow workers); with JAX start one process per host with "
                          f"--coordinator_address, --num_processes and --process_id (or use srun / Open MPI's mpirun)")
    import jax

    devices = jax.local_devices()
    if len(devices) > 1:
        return JaxDataParallel(devices)
    return SingleProcess()
