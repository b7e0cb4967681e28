"""The MLLOG writer: mlperf_logging.mllog to one file per run, on the chief worker only.

Every line is formatted by mlperf_logging itself; this wrapper only picks the file, silences non-chief workers and
passes stack_offset so that metadata.file/lineno name the real call site, not this module. Each line reaches the file
in one write; a write that fails (disk full, file size limit) is cut back to the last whole line and ends the run
with LogWriteError instead of being swallowed as logging handlers do.
"""
from __future__ import annotations

import datetime
import logging
import os
import tempfile
import threading

from mlperf_logging.mllog import constants as C  # noqa: N812  (the MLPerf key names)
from mlperf_logging.mllog import mllog

_counter_lock = threading.Lock()
_logger_serial = 0


class LogWriteError(OSError):
    """The MLPerf log could not be written: the run cannot be recorded, so it stops."""


def check_output_dir(path: str, flag: str = "--output_dir") -> None:
    """A folder we can create files in, or one we can create; one-line ConfigError otherwise. Runs before anything
    expensive, so a typo does not cost a data load. A missing folder is not created here but when the log opens
    (new_log_path), so a start that fails leaves nothing behind: its nearest existing parent is probed instead."""
    from mlperf_keras.config import ConfigError

    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{flag}={path} is a file, not a folder")
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ConfigError(f"{flag}={path} cannot be created: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=existing)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{flag}={path} is not writable ({e.strerror or e})") from None


class _WholeLineHandler(logging.Handler):
    """Appends each formatted record as one os.write of a whole line. On a failed or short write the file is cut
    back to its last complete line and the error kept in .error (logging would swallow a raised one)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self.good_size = os.fstat(self.fd).st_size
        self.error: str | None = None

    def emit(self, record):
        if self.error is not None or self.fd is None:
            return
        data = (self.format(record) + "\n").encode("utf-8")
        try:
            written = os.write(self.fd, data)
            if written != len(data):
                raise OSError(f"short write, {written} of {len(data)} bytes (disk full or file size limit?)")
        except OSError as e:
            self.error = f"{self.path}: cannot write the MLPerf log ({e.strerror or e})"
            try:
                os.ftruncate(self.fd, self.good_size)
            except OSError:
                pass
            return
        self.good_size += len(data)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        super().close()


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
        handler = _WholeLineHandler(path)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        self._file = handler
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
            self._raise_if_failed()

    def start(self, key, value=None, metadata=None, stack_offset=0):
        if self._mllogger:
            self._mllogger.start(key, value, metadata=metadata, stack_offset=2 + stack_offset)
            self._raise_if_failed()

    def end(self, key, value=None, metadata=None, stack_offset=0):
        if self._mllogger:
            self._mllogger.end(key, value, metadata=metadata, stack_offset=2 + stack_offset)
            self._raise_if_failed()

    def _raise_if_failed(self):
        if self._file.error is not None:
            error, self._mllogger = self._file.error, None  # nothing more can be written
            for handler in self._handlers:
                handler.close()
                self._logger.removeHandler(handler)
            raise LogWriteError(error)

    def close(self):
        if self._mllogger:
            for handler in self._handlers:
                handler.flush()
                handler.close()
                self._logger.removeHandler(handler)
            self._mllogger = None


__all__ = ["C", "LogWriteError", "MLPerfLog", "check_output_dir", "new_log_path"]
