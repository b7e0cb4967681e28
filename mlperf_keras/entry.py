"""How every entry point (train, benchmark, report, sweep, the data_prep commands) starts: absl's app.run with the
exit statuses this package documents for what absl would otherwise end itself.

absl ends a bad flag value, a missing --flagfile or a missing required flag with exit status 1 (and asking for
--help, --helpshort or --helpfull with 1 too); here those are 2, "could not start", with one line on stderr, and
help is 0. Positional arguments are refused (2, one line) unless the entry point reads them; an app.UsageError from
main is 2 with one line too, not absl's whole help text. A missing backend (JAX, TensorFlow) is 2 with one line
naming the extra to install, not a traceback.
Pure Python: importing this must never import TensorFlow or Keras.
"""
from __future__ import annotations

import sys

from absl import app, flags

EXIT_BAD_START = 2

# Top-level module a backend import fails on -> what to install (setup.py's extras).
MISSING_MODULE_HINTS = {
    "jax": "JAX: pip install '.[jax]' ('.[jax-cuda]' for NVIDIA GPUs)",
    "jaxlib": "JAX: pip install '.[jax]' ('.[jax-cuda]' for NVIDIA GPUs)",
    "tensorflow": "TensorFlow: pip install '.[tf-cpu]' ('.[gpu]' for NVIDIA GPUs)",
}


def one_line(message: str) -> str:
    return " ".join(str(message).split())


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parser with this package's exit statuses (app.run's flags_parser)."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as error:
        # absl prefixes a flagfile it cannot open with "ERROR:: ": one "error:" is enough.
        print(f"error: {one_line(error).removeprefix('ERROR:: ')}", file=sys.stderr)
        sys.exit(EXIT_BAD_START)
    except SystemExit as stop:
        # absl's help flags print the help and then exit 1 from inside the parser; nothing else in it exits.
        if stop.code == 1:
            sys.exit(0)
        raise


def missing_module_message(error: ModuleNotFoundError) -> str | None:
    """One line for a backend that is not installed; None for any other missing module (a bug: let it raise)."""
    top = (error.name or "").split(".")[0]
    hint = MISSING_MODULE_HINTS.get(top)
    if hint is None:
        return None
    return f"error: no module {top!r}: install {hint}"


def run(main, argv: list[str] | None = None, takes_arguments: bool = False) -> None:
    """app.run(main) for an entry point: see the module docstring for the exit statuses it adds. takes_arguments:
    main reads positional arguments (the reporter's log folders, the sweep's flags after --); else any is refused."""

    def guarded_main(args):
        try:
            if len(args) > 1 and not takes_arguments:
                raise app.UsageError(f"unexpected arguments: {' '.join(args[1:])}")
            return main(args)
        except app.UsageError as error:
            print(f"error: {one_line(error)}", file=sys.stderr)
            return EXIT_BAD_START
        except ModuleNotFoundError as error:
            message = missing_module_message(error)
            if message is None:
                raise
            print(message, file=sys.stderr)
            return EXIT_BAD_START

    app.run(guarded_main, argv=argv, flags_parser=parse_flags)
