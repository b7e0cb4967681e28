"""The MLLOG writer: mlperf_logging.mllog to one file per run, on the chief worker only.

Every line is formatted by mlperf_logging itself; this wrapper only picks the file, silences non-chief workers and
passes stack_offset so that metadata.file/lineno name the real call site, not this module.
"""
from __future__ import annotations

import datetime
import logging
import os
import threading

from mlperf_logging.mllog import constants as C  # noqa: N812  (the MLPerf key names)
from mlperf_logging.mllog import mllog

_counter_lock = threading.Lock()
_logger_serial = 0


def new_log_path(output_dir: str, model: str, seed: int) -> str:
    """A fresh file name under output_dir; never an existing file (results are never overwritten)."""
    os.makedirs(output_dir, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = os.path.join(output_dir, f"{model}_seed{seed}_{stamp}")
    path, n = base + ".log", 1
    while True:
        try:  # O_EXCL: two runs starting in the same second still get two files
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(fd)
            return path
        except FileExistsError:
            n += 1
            path = f"{base}_{n}.log"


class MLPerfLog:
    """MLLOG events for one run. On non-chief workers every call is a no-op."""

    def __init__(self, path: str | None, echo: bool = False):
        self.path = path
        self._mllogger = None
        if path is None:
            return
        global _logger_serial
        with _counter_lock:
            _logger_serial += 1
            name = f"mlperf_keras.mllog.{_logger_serial}"
        logger = logging.getLogger(name)
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = logging.FileHandler(path, mode="a")
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        if echo:
            logger.addHandler(logging.StreamHandler())
        self._handlers = list(logger.handlers)
        self._logger = logger
        # root_dir trims the package location from metadata.file, as the reference logs do.
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._mllogger = mllog.MLLogger(logger=logger, default_stack_offset=2, root_dir=root)

    def event(self, key, value=None, metadata=None, stack_offset=0):
        if self._mllogger:
            self._mllogger.event(key, value, metadata=metadata, stack_offset=2 + stack_offset)

    def start(self, key, value=None, metadata=None, stack_offset=0):
        if self._mllogger:
            self._mllogger.start(key, value, metadata=metadata, stack_offset=2 + stack_offset)

    def end(self, key, value=None, metadata=None, stack_offset=0):
        if self._mllogger:
            self._mllogger.end(key, value, metadata=metadata, stack_offset=2 + stack_offset)

    def close(self):
        if self._mllogger:
            for handler in self._handlers:
                handler.flush()
                handler.close()
                self._logger.removeHandler(handler)
            self._mllogger = None


__all__ = ["C", "MLPerfLog", "new_log_path"]
