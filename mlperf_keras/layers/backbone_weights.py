"""Pretrained backbone weights as .npz files keyed "<layer name>/<variable name>": the one home of writing them
(data_prep.ssd_backbone, data_prep.maskrcnn_backbone, tests), loading them into a model's backbone variables (SSD's
ResNet-34, Mask R-CNN's ResNet-50) and naming them in the MLPerf log. NumPy only: no Keras or TensorFlow import.
"""
from __future__ import annotations

import hashlib
import os
import zipfile
from typing import Mapping

import numpy as np


def write_npz(path: str, arrays: Mapping[str, np.ndarray]) -> int:
    """Write arrays to path atomically (a temporary name of this process, then a rename); returns how many. OSError
    if it cannot be written (the temporary file is removed)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return len(arrays)


def load_npz(variables: Mapping, path: str, convert_hint: str, model_name: str = "the model") -> int:
    """Assign every variable of {key: variable} from the .npz at path; every variable must be there with its shape
    and every array must name one (config.ConfigError otherwise, naming the file; convert_hint says how to make a
    right one). Returns the count loaded."""
    from mlperf_keras.config import ConfigError

    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise ConfigError(f"{path}: backbone weights file not found") from None
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{path}: not a readable .npz of backbone weights ({e})") from None
    for key, v in variables.items():
        if key not in arrays:
            raise ConfigError(f"{path}: no array for backbone variable {key} ({convert_hint})")
        if tuple(arrays[key].shape) != tuple(v.shape):
            raise ConfigError(f"{path}: {key} has shape {tuple(arrays[key].shape)}, the model's is {tuple(v.shape)}")
    unknown = sorted(set(arrays) - set(variables))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]} names no backbone variable of {model_name} "
                          f"({len(unknown)} such arrays)")
    for key, v in variables.items():
        v.assign(arrays[key].astype(v.dtype))
    return len(variables)


def weights_id(path) -> str:
    """What the log says a run started from: "<file name> sha256:<hex digest>", or "none" (random weights)."""
    if path in (None, "none"):
        return "none"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return f"{os.path.basename(path)} sha256:{digest.hexdigest()}"


__all__ = ["load_npz", "weights_id", "write_npz"]
