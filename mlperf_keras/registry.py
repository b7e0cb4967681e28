"""The one workload registry: MLPerf model names -> workload modules. A new workload is one module + one line here."""
from __future__ import annotations

import importlib

from mlperf_keras.config import MODEL_NAMES, ConfigError

# name -> (module, class); None = not built yet, with the issue that builds it.
_WORKLOADS = {
    "ncf": ("mlperf_keras.workloads.ncf", "NCF"),
    "resnet": ("mlperf_keras.workloads.resnet", "ResNet50"),
    "ssd": ("mlperf_keras.workloads.ssd", "SSD"),
    "transformer": ("mlperf_keras.workloads.transformer", "Transformer"),
    "gnmt": ("mlperf_keras.workloads.gnmt", "GNMT"),
    "maskrcnn": ("mlperf_keras.workloads.maskrcnn", "MaskRCNN"),
}
assert set(_WORKLOADS) == set(MODEL_NAMES)


def available() -> list[str]:
    return sorted(name for name, entry in _WORKLOADS.items() if entry)


def get(name: str):
    """An instance of the named workload, or a ConfigError that says what exists."""
    if name not in _WORKLOADS:
        raise ConfigError(f"unknown --model={name!r}; MLPerf workloads: {', '.join(MODEL_NAMES)}")
    entry = _WORKLOADS[name]
    if entry is None:
        raise ConfigError(f"--model={name} is not built yet in this version of mlperf_keras; "
                          f"built: {', '.join(available())}")
    module, cls = entry
    return getattr(importlib.import_module(module), cls)()
