"""The reporter's data: one run per log file, and the reasons a file was not used."""

import dataclasses
import os
from typing import Optional


@dataclasses.dataclass
class Problem:
    """Something wrong with one input, by file (or folder) name."""
    path: str
    reason: str
    skipped: bool = True  # False: reported, but the run is still used


@dataclasses.dataclass
class Compliance:
    """The official compliance checker's verdict on one log."""
    status: str                     # "pass" | "fail" | "unsupported"
    ruleset: Optional[str] = None   # the checker ruleset used, None if none applies
    detail: str = ""                # failing rules, or why unsupported


@dataclasses.dataclass
class RunRecord:
    """What the reporter knows about one training run (one MLLOG file)."""
    path: str
    benchmark: str
    run_start_ms: float
    run_stop_ms: float
    status: str                              # run_stop metadata status: "success" | "aborted" | ...
    converged: bool
    org: Optional[str] = None
    division: Optional[str] = None
    submission_status: Optional[str] = None  # onprem | cloud | research | preview
    platform: Optional[str] = None           # submission_platform, e.g. "r740_t4"
    accelerator_model: Optional[str] = None  # "NVIDIA T4", "cpu", or None if not logged
    accelerator_count: Optional[int] = None  # total over all workers; 0 for cpu
    accelerator_memory_gb: Optional[float] = None
    num_workers: Optional[int] = None
    host_cpu: Optional[str] = None
    host_memory_gb: Optional[float] = None
    host_processors: Optional[int] = None    # sockets, physical cores and hardware threads of the whole host
    host_cpu_cores: Optional[int] = None
    host_vcpus: Optional[int] = None
    framework: Optional[str] = None
    keras_backend: Optional[str] = None
    ruleset: Optional[str] = None            # "0.5" | "0.6" | "0.7" ..., None if not logged
    seed: Optional[int] = None
    global_batch_size: Optional[float] = None
    quality_target: Optional[float] = None   # the target the run stopped at (may be a demo target)
    mlperf_target: Optional[object] = None   # the round's official target
    quality_curve: list = dataclasses.field(default_factory=list)  # [(epoch_num, value), ...]
    epochs_to_converge: Optional[float] = None
    throughput: Optional[float] = None       # samples per second, whole job
    throughput_source: Optional[str] = None
    # Derived identity (see systems.py).
    system: str = ""
    gpu_type: str = "unknown"
    device_count: Optional[int] = None       # GPUs, or CPU workers for cpu runs: the scaling axis
    family: str = ""                         # system without the count: what speedups compare
    demo: bool = False                       # logged demo=true, or stopped below MLPerf's target
    missing: list = dataclasses.field(default_factory=list)   # keys the log did not have
    notes: list = dataclasses.field(default_factory=list)
    compliance: Optional[Compliance] = None
    log_format: str = "mllog"                # "mllog" (v0.7+ JSON lines), "mll_v0.6" or "mlp_v0.5"
    logged_benchmark: Optional[str] = None   # as the log spells it ("mask" for maskrcnn)
    own_log: bool = False                    # written by mlperf_keras (it logs its ruleset)
    round_source: str = ""                   # how the round (ruleset) was found
    resumed: bool = False                    # MLLOG 'resumed': continued from a checkpoint, never valid
    identified_by: str = ""                  # how the system was identified (folder + systems JSON, or platform)
    system_folder: Optional[str] = None      # the results/<system> folder, for logs in a submission layout

    @property
    def time_to_train_min(self):
        return (self.run_stop_ms - self.run_start_ms) / 60000.0

    @property
    def file_name(self):
        return os.path.basename(self.path)
