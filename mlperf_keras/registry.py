"""The one workload registry: MLPerf model names -> workload modules. A new workload is one module + one line here."""
from __future__ import annotations

import importlib

from mlperf_keras.config import MODEL_NAMES, ConfigError

# name -> (module, class), imported only when asked for (no TensorFlow import before a run needs it).
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
    return sorted(_WORKLOADS)


def get(name: str):
    """An instance of the named workload, or a ConfigError that says what exists."""
    if name not in _WORKLOADS:
        raise ConfigError(f"unknown --model={name!r}; MLPerf workloads: {', '.join(MODEL_NAMES)}")
    module, cls = _WORKLOADS[name]
    return getattr(importlib.import_module(module), cls)()
