"""What both backbone converters (data_prep/ssd_backbone.py: torchvision's ResNet-34; data_prep/maskrcnn_backbone.py:
Detectron's MSRA ResNet-50) do alike once each names its source's tensors in ours: float32 arrays, convolution
weights from OIHW to Keras' HWIO, the .npz written under a temporary name and renamed, and the command's one line."""
from __future__ import annotations

import sys
import time
from typing import Callable, Mapping

import numpy as np

from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.layers import backbone_weights


def to_keras_arrays(tensors: Mapping[str, np.ndarray], keras_name: Callable[[str], str | None], source: str,
                    vector_kind: str) -> dict[str, np.ndarray]:
    """{keras_name(key): float32 array} for every tensor keras_name maps (None: one the backbone drops); kernels
    (names ending /kernel) must be 4-D OIHW and become HWIO, everything else (vector_kind, for messages) 1-D. A
    DataError names source."""
    out = {}
    for key, value in tensors.items():
        try:
            name = keras_name(key)
        except DataError as e:
            raise DataError(f"{source}: {e}") from None
        if name is None:
            continue
        value = np.asarray(value, dtype=np.float32)
        if name.endswith("/kernel"):
            if value.ndim != 4:
                raise DataError(f"{source}: {key} has shape {value.shape}, a convolution weight is 4-D (OIHW)")
            value = value.transpose(2, 3, 1, 0)   # OIHW -> HWIO
        elif value.ndim != 1:
            raise DataError(f"{source}: {key} has shape {value.shape}, {vector_kind} is 1-D")
        out[name] = np.ascontiguousarray(value)
    return out


def write_npz(output: str, arrays: dict[str, np.ndarray]) -> int:
    """layers.backbone_weights.write_npz, its OSError as a one-line DataError; returns the number of arrays."""
    try:
        return backbone_weights.write_npz(output, arrays)
    except OSError as e:
        raise DataError(f"{output}: cannot write ({e})") from None


def run(convert_file: Callable[[str, str], int], source: str, output: str, what: str) -> None:
    """A converter command's body: convert_file(source, output), then one line saying how many `what` it wrote, or
    the DataError as one line and exit status 2."""
    start = time.time()
    try:
        count = convert_file(source, output)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {count} backbone {what} to {output} in {time.time() - start:.1f} s")
