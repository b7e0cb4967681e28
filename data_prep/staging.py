"""What keeps an interrupted data_prep command from leaking its staging folder: SIGTERM becomes SystemExit, so the
`with StagedOutput(...)` block unwinds and removes the folder (SIGINT already raises KeyboardInterrupt). A killed
(SIGKILL) preparation's folder is removed by the next StagedOutput in the same output folder."""
from __future__ import annotations

import contextlib
import signal
import sys


@contextlib.contextmanager
def exit_on_termination():
    """Within the block, SIGTERM (and SIGHUP) raise SystemExit(128 + signal) instead of killing the process."""
    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def interrupted_message(error: BaseException) -> str:
    """One line for an interrupted preparation."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted (SIGINT); nothing was written to --output_dir (its staging folder was removed)"
    return (f"stopped by signal {error.code - 128}; nothing was written to --output_dir (its staging folder was "
            f"removed)")


__all__ = ["exit_on_termination", "interrupted_message"]
