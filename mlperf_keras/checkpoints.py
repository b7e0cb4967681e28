"""Checkpoints of a run (--checkpoint_dir, --resume): model and optimizer state at epoch ends, and the final model.

One .npz per checkpoint holds every model variable (trainable and not: batch-norm statistics, seed-generator states)
and every optimizer variable (iteration count, moments, loss scale), in the order Keras lists them, with their paths
and a JSON header (workload, seed, global batch, hyperparameters, the epoch that ended). It is written to a temporary
file and renamed, so a checkpoint on disk is always whole; the newest `keep` epoch checkpoints are kept. The same
format works on the TensorFlow and JAX backends (plain variable values, no backend's own checkpoint format).

A resumed run continues from the epoch after the checkpoint with the same data order (every workload's epoch order
is a function of seed and epoch), but it is never an MLPerf result: the rules time one uninterrupted run. The loop
logs it with the `resumed` event, which the reporter refuses to score.
"""
from __future__ import annotations

import glob
import json
import os
import re
import tempfile

import numpy as np

from mlperf_keras.config import ConfigError, RunConfig

FINAL_NAME = "final.npz"
_EPOCH_FILE = re.compile(r"^epoch-(\d{5})\.npz$")


def _header(config: RunConfig, epoch: int | None) -> dict:
    return {"model": config.model, "seed": config.seed, "global_batch_size": config.global_batch_size,
            "hparams": json.loads(json.dumps(dict(config.hparams), default=list)), "epoch": epoch}


def save(directory: str, name: str, config: RunConfig, epoch: int | None, model, optimizer) -> str:
    """Write model and optimizer variables to directory/name atomically; returns the path."""
    arrays = {"header": np.array(json.dumps(_header(config, epoch), sort_keys=True))}
    for prefix, variables in (("model", model.variables), ("optimizer", optimizer.variables)):
        arrays[f"{prefix}_paths"] = np.array([v.path for v in variables])
        for i, v in enumerate(variables):
            arrays[f"{prefix}_{i}"] = np.asarray(v.numpy() if hasattr(v, "numpy") else v.value)
    path = os.path.join(directory, name)
    os.makedirs(directory, exist_ok=True)   # train checks it can be created, and creates it only once the run starts
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def save_epoch(directory: str, config: RunConfig, epoch: int, model, optimizer, keep: int) -> str:
    """The checkpoint after 0-based `epoch`; older epoch checkpoints beyond the newest `keep` are removed."""
    path = save(directory, f"epoch-{epoch:05d}.npz", config, epoch, model, optimizer)
    for old in epoch_checkpoints(directory)[:-keep]:
        os.remove(old)
    return path


def epoch_checkpoints(directory: str) -> list[str]:
    """Epoch checkpoints in directory, oldest first."""
    found = [p for p in glob.glob(os.path.join(directory, "epoch-*.npz")) if _EPOCH_FILE.match(os.path.basename(p))]
    return sorted(found)


def latest(directory: str) -> str | None:
    found = epoch_checkpoints(directory)
    return found[-1] if found else None


def read_header(path: str) -> dict:
    try:
        with np.load(path) as data:
            return json.loads(str(data["header"]))
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"{path}: not a readable checkpoint ({e})") from None


def check_compatible(path: str, config: RunConfig) -> dict:
    """The checkpoint's header, after checking it was written by a run of the same workload, seed, batch and
    hyperparameters (anything else would continue a different run). One-line ConfigError otherwise."""
    header = read_header(path)
    mine = _header(config, header.get("epoch"))
    for key in ("model", "seed", "global_batch_size", "hparams"):
        if header.get(key) != mine[key]:
            if key == "hparams":
                diff = sorted(k for k in set(header[key]) | set(mine[key]) if header[key].get(k) != mine[key].get(k))
                raise ConfigError(f"--resume: {path} was written with other hyperparameters ({', '.join(diff)})")
            raise ConfigError(f"--resume: {path} was written with {key}={header.get(key)!r}, this run has "
                              f"{mine[key]!r}")
    return header


def restore(path: str, model, optimizer) -> None:
    """Assign a checkpoint's values to model and optimizer variables (built, in the same order and shapes)."""
    with np.load(path) as data:
        for prefix, variables in (("model", model.variables), ("optimizer", optimizer.variables)):
            # By position and shape: Keras makes auto-generated names unique per process (adam, adam_1...), so the
            # paths of the same model differ between runs in one process.
            if len(data[f"{prefix}_paths"]) != len(variables):
                raise ConfigError(f"--resume: {path} holds {len(data[f'{prefix}_paths'])} {prefix} variables, this "
                                  f"run builds {len(variables)}")
            for i, v in enumerate(variables):
                value = data[f"{prefix}_{i}"]
                if tuple(value.shape) != tuple(v.shape):
                    raise ConfigError(f"--resume: {path}: {v.path} has shape {value.shape}, the model {v.shape}")
                v.assign(value)


def load_arrays(path: str, prefix: str = "model") -> list[tuple[str, np.ndarray]]:
    """[(variable path, value)] of a checkpoint's model (or optimizer) variables, in order (for users and tests)."""
    with np.load(path) as data:
        return [(str(p), data[f"{prefix}_{i}"]) for i, p in enumerate(data[f"{prefix}_paths"])]


__all__ = ["FINAL_NAME", "check_compatible", "epoch_checkpoints", "latest", "load_arrays", "read_header", "restore",
           "save", "save_epoch"]
