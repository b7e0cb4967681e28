"""What machine a run is on: accelerator model/count/memory, CPU, host memory, and peak FLOP/s tables.

Read from nvidia-smi and /proc, never from a framework, so the reporter and JAX-only machines can use it too.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess

# Dense peak TFLOP/s per accelerator, by (model substring, precision); for "fraction of peak" in benchmarks.
PEAK_TFLOPS = {
    "T4": {"fp32": 8.1, "fp16": 65.0, "bf16": 65.0},
    "V100": {"fp32": 14.0, "fp16": 112.0, "bf16": 112.0},   # PCIe; SXM2 is 15.7 / 125
    "A100": {"fp32": 19.5, "fp16": 312.0, "bf16": 312.0},
    "H100": {"fp32": 67.0, "fp16": 989.0, "bf16": 989.0},
    "H200": {"fp32": 67.0, "fp16": 989.0, "bf16": 989.0},
}


def detect_accelerators() -> tuple[str, int, float | None]:
    """(model, count visible to this process, memory GB) from nvidia-smi; ("cpu", 0, None) without GPUs."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
            rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if visible is not None:
                wanted = [v for v in visible.split(",") if v.strip()]
                rows = [rows[int(v)] for v in wanted if v.strip().isdigit() and int(v) < len(rows)] or rows
            if rows:
                return rows[0][0].strip(), len(rows), round(float(rows[0][1]) / 1024, 1)
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            pass
    return "cpu", 0, None


def host_cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} x {os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} x {os.cpu_count()}"


def host_cpu_counts(cpuinfo_path: str = "/proc/cpuinfo") -> dict:
    """{"host_processors": sockets, "host_cpu_cores": physical cores, "host_vcpus": hardware threads} of this host
    (the system description's host_processors_per_node, host_processor_core_count and _vcpu_count come from them);
    a count that cannot be read is None. From /proc/cpuinfo's distinct physical ids and (physical id, core id)
    pairs; without it only the vCPUs (os.cpu_count) are known."""
    processors, sockets, cores = 0, set(), set()
    socket = None
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                name, _, value = line.partition(":")
                name, value = name.strip(), value.strip()
                if name == "processor":
                    processors += 1
                elif name == "physical id":
                    socket = value
                    sockets.add(value)
                elif name == "core id":
                    cores.add((socket, value))
    except OSError:
        pass
    return {"host_processors": len(sockets) or None, "host_cpu_cores": len(cores) or None,
            "host_vcpus": processors or os.cpu_count()}


def host_memory_gb() -> float:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return 0.0


def peak_tflops(model: str, precision: str) -> float | None:
    for key, table in PEAK_TFLOPS.items():
        if key in model.upper():
            return table[precision]
    return None


# The hardware flagfiles in flags/ (their --platform) -> the accelerator they were written for, as nvidia-smi names
# it (a substring of the model; "cpu" for no accelerator).
PRESET_ACCELERATORS = {"cpu": "cpu", "r740_t4": "T4", "r740_v100_pcie": "V100", "a100": "A100", "h200": "H200"}


def preset_mismatch_warning(platform: str | None, detected_model: str) -> str | None:
    """A warning line when --platform names a hardware preset for another accelerator than the one detected (e.g.
    flags/r740_t4.flags on an H200: its batch sizes, precision and peak TFLOP/s are wrong there, and so is the
    logged submission_platform); None when they match or the platform is not one of the presets."""
    wanted = PRESET_ACCELERATORS.get(platform or "")
    if wanted is None:
        return None
    have_gpu = detected_model != "cpu"
    if (wanted == "cpu" and not have_gpu) or (wanted != "cpu" and wanted in detected_model.upper()):
        return None
    here = detected_model if have_gpu else "no GPU"
    matching = [name for name, model in PRESET_ACCELERATORS.items()
                if (model == "cpu" and not have_gpu) or (model != "cpu" and model in detected_model.upper())]
    advice = (f"use --flagfile=flags/{matching[0]}.flags" if matching
              else "write a flagfile for it (see flags/) or pass --platform=<its name>")
    machine = "a CPU-only machine" if wanted == "cpu" else f"NVIDIA {wanted}"
    return (f"warning: --platform={platform} is the preset for {machine}, but this machine has {here}: its batch "
            f"sizes, precision and peak TFLOP/s do not fit, and the log will name the wrong system; {advice}")
