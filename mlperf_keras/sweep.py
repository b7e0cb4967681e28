"""python -m mlperf_keras.sweep --model=X (--seeds=1,2,3 | --num_runs=N [--first_seed=S]) --output_dir=D
                             [--launcher="horovodrun -np 2 -H localhost:2"] -- <extra train flags>

Runs N seeded runs of one workload into one results folder, one after another, each as
`[launcher] python -m mlperf_keras.train --model=X --seed=S --output_dir=D <extra flags>`. Output is
streamed as it comes. A failed run does not stop the sweep; at the end every seed's outcome is
listed, and the exit status is 1 if any run failed. A run that ended at --max_epochs without reaching the target
(train's exit status 5, or a launcher's non-zero status with a log whose run_stop is aborted without a reason) is
listed as "not converged", not as failed: its log is complete and the reporter counts it as a non-converged run. SIGTERM or SIGINT (Ctrl-C) to the sweep is passed on to
the running training (which then logs run_stop aborted), the sweep waits for it, names the interrupted seed and
exits 128 + the signal's number. Then:
`python -m mlperf_keras.report --logs D --out REPORT`.

Each run is train's own start, so under --division=closed (train's default) an --hparams item the closed division
may not change makes every run exit 2 before its log opens (listed as failed); pass --division=open among the extra
flags to run it. Imports nothing heavy: the runs are subprocesses, so TensorFlow is only loaded inside them.
"""

import dataclasses
import glob
import os
import re
import shlex
import signal
import subprocess
import sys
import time

from absl import flags

from mlperf_keras import entry
from mlperf_keras.config import EXIT_NOT_CONVERGED
from mlperf_keras.reporting.logfiles import read_events
from mlperf_keras.reporting.parse import parse_log

FLAGS = flags.FLAGS


def define_flags():
    """Only when run as a program: --model, --output_dir and --dry_run are also mlperf_keras.train's flag
    names, and absl refuses a flag defined twice in one process (tests import both modules)."""
    flags.DEFINE_string("model", None, "The workload, as for mlperf_keras.train (ncf, resnet, ...).")
    flags.DEFINE_list("seeds", None, "Seeds to run, e.g. 1,2,3. Exclusive with --num_runs.")
    flags.DEFINE_integer("num_runs", None, "Number of runs, seeds --first_seed, --first_seed+1, ...")
    flags.DEFINE_integer("first_seed", 1, "First seed with --num_runs.")
    flags.DEFINE_string("output_dir", None, "The results folder every run writes its MLLOG file into.")
    flags.DEFINE_string("launcher", "", "Command put before each run, e.g. \"horovodrun -np 2 -H localhost:2\".")
    flags.DEFINE_string("train_module", "mlperf_keras.train", "The module each run executes with python -m.")
    flags.DEFINE_bool("dry_run", False, "Print the commands without running them.")
    flags.mark_flags_as_required(["model", "output_dir"])


EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_ARGS, EXIT_INTERRUPTED = 0, 1, 2, 130


class SweepError(ValueError):
    """Bad sweep arguments (said before anything runs)."""


class SweepInterrupted(Exception):
    """SIGTERM/SIGINT reached the sweep during a run; the run was passed the signal and has ended."""

    def __init__(self, seed, signum):
        super().__init__(f"seed {seed}")
        self.seed, self.signum = seed, signum


# After passing a signal on, how long a run may take to log run_stop and exit before it is killed.
SIGNAL_GRACE_SECONDS = 120


def wait_forwarding_signals(child: subprocess.Popen, grace_seconds: float = SIGNAL_GRACE_SECONDS):
    """Wait for child; SIGTERM/SIGINT received meanwhile are passed on to it (it runs in its own session, so a
    terminal's Ctrl-C reaches it only this way, once). Returns (exit status, the first signal received or None)."""
    received = []

    def forward(signum, frame):
        received.append(signum)
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        deadline = None
        while True:
            try:
                return child.wait(timeout=1.0), (received[0] if received else None)
            except subprocess.TimeoutExpired:
                if received and deadline is None:
                    deadline = time.time() + grace_seconds
                if deadline is not None and time.time() > deadline:
                    child.kill()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@dataclasses.dataclass
class RunOutcome:
    seed: int
    returncode: int
    seconds: float
    logs: list            # MLLOG files this run wrote
    summary: str          # what its log says (status, time to train), or why there is none

    @property
    def not_converged(self):
        """Ended at --max_epochs without the target: train's own status, or under a launcher (which reports its
        own non-zero status) a log that ends with run_stop aborted and no reason (a diverged or killed run has one)."""
        if self.returncode == EXIT_NOT_CONVERGED:
            return True
        return self.returncode != 0 and bool(self.logs) and all(_stopped_at_max_epochs(p) for p in self.logs)

    @property
    def failed(self):
        return self.returncode != 0 and not self.not_converged

    @property
    def state(self):
        if self.not_converged:
            return f"not converged (exit {self.returncode})"
        return f"FAILED (exit {self.returncode})" if self.failed else "ok"


def _stopped_at_max_epochs(path) -> bool:
    try:
        events = read_events(path)[0]
    except OSError:
        return False
    stops = [e for e in events if e.key == "run_stop"]
    return len(stops) == 1 and stops[0].metadata.get("status") == "aborted" and "reason" not in stops[0].metadata


def seed_list(seeds=None, num_runs=None, first_seed=1):
    """The seeds to run, from either an explicit list or a count; each seed once."""
    if (seeds is None) == (num_runs is None):
        raise SweepError("give exactly one of --seeds and --num_runs")
    if seeds is not None:
        try:
            values = [int(str(s).strip()) for s in seeds if str(s).strip()]
        except ValueError as error:
            raise SweepError(f"--seeds must be integers: {error}") from None
        if not values:
            raise SweepError("--seeds is empty")
    else:
        if num_runs < 1:
            raise SweepError("--num_runs must be at least 1")
        values = list(range(first_seed, first_seed + num_runs))
    duplicates = sorted({s for s in values if values.count(s) > 1})
    if duplicates:
        raise SweepError(f"seeds repeat: {duplicates}; MLPerf needs a different seed per run")
    return values


def run_command(model, seed, output_dir, extra_flags=(), launcher="", train_module="mlperf_keras.train",
                python=sys.executable):
    """The command line of one run."""
    return (shlex.split(launcher) + [python, "-m", train_module, f"--model={model}", f"--seed={seed}",
                                     f"--output_dir={output_dir}"] + list(extra_flags))


def seeds_already_in(output_dir, model, seeds):
    """Seeds that already have a log of this model in output_dir (by the train module's file names)."""
    found = set()
    pattern = re.compile(rf"^{re.escape(model)}_seed(-?\d+)_")
    for path in glob.glob(os.path.join(output_dir, "*.log")):
        match = pattern.match(os.path.basename(path))
        if match and int(match.group(1)) in seeds:
            found.add(int(match.group(1)))
    return sorted(found)


def run_sweep(model, seeds, output_dir, extra_flags=(), launcher="", train_module="mlperf_keras.train",
              out=sys.stdout, outcomes=None):
    """Run every seed in turn; returns [RunOutcome] (also appended to `outcomes` as they finish, so a
    caller interrupted by Ctrl-C still has the finished runs)."""
    os.makedirs(output_dir, exist_ok=True)
    outcomes = [] if outcomes is None else outcomes
    for index, seed in enumerate(seeds, start=1):
        command = run_command(model, seed, output_dir, extra_flags, launcher, train_module)
        print(f"\n=== sweep {model}: run {index}/{len(seeds)}, seed {seed}\n=== {shlex.join(command)}",
              file=out, flush=True)
        before = set(glob.glob(os.path.join(output_dir, "**", "*.log"), recursive=True))
        started = time.time()
        signum = None
        try:
            # Inherit stdout/stderr: the run's progress lines appear as it prints them.
            child = subprocess.Popen(command, start_new_session=True)
        except OSError as error:  # launcher or python not found
            print(f"=== sweep: cannot start run for seed {seed}: {error}", file=out, flush=True)
            returncode = 127
        else:
            returncode, signum = wait_forwarding_signals(child)
        seconds = time.time() - started
        logs = sorted(set(glob.glob(os.path.join(output_dir, "**", "*.log"), recursive=True)) - before)
        outcome = RunOutcome(seed, returncode, seconds, logs, _log_summary(logs))
        outcomes.append(outcome)
        verdict = "done" if outcome.state == "ok" else outcome.state
        print(f"=== sweep: seed {seed} {verdict} in {seconds:.0f} s; {outcome.summary}", file=out, flush=True)
        if signum is not None:
            raise SweepInterrupted(seed, signum)
    return outcomes


def _log_summary(logs):
    if not logs:
        return "no MLLOG file written"
    parts = []
    for path in logs:
        record, problems = parse_log(path)
        if record is None:
            reasons = "; ".join(p.reason for p in problems if p.skipped)
            parts.append(f"{os.path.basename(path)}: unusable ({reasons})")
        else:
            parts.append(f"{os.path.basename(path)}: {record.status}, {record.time_to_train_min:.2f} min to train")
    return "; ".join(parts)


def print_summary(model, outcomes, output_dir, out=sys.stdout):
    failed = [o for o in outcomes if o.failed]
    not_converged = [o for o in outcomes if o.not_converged]
    print(f"\n=== sweep {model} summary: {len(outcomes) - len(failed)} of {len(outcomes)} runs completed"
          + (f" ({len(not_converged)} did not reach the target by --max_epochs)" if not_converged else ""), file=out)
    for outcome in outcomes:
        print(f"  seed {outcome.seed:>6}: {outcome.state:26s} {outcome.seconds:7.0f} s  {outcome.summary}", file=out)
    if not_converged:
        print(f"=== not converged seeds: {','.join(str(o.seed) for o in not_converged)}", file=out)
    if failed:
        print(f"=== failed seeds: {','.join(str(o.seed) for o in failed)}", file=out)
    print(f"=== report: python -m mlperf_keras.report --logs {output_dir} --out <report folder>", file=out, flush=True)


def main(argv):
    extra_flags = argv[1:]  # everything after "--"
    try:
        seeds = seed_list(FLAGS.seeds, FLAGS.num_runs, FLAGS.first_seed)
    except SweepError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_ARGS
    reused = seeds_already_in(FLAGS.output_dir, FLAGS.model, seeds)
    if reused:
        print(f"warning: {FLAGS.output_dir} already has {FLAGS.model} logs with seeds {reused}; the report keeps "
              "only the first run of each seed", file=sys.stderr)
    if FLAGS.dry_run:
        for seed in seeds:
            print(shlex.join(run_command(FLAGS.model, seed, FLAGS.output_dir, extra_flags, FLAGS.launcher,
                                         FLAGS.train_module)))
        return EXIT_OK
    outcomes = []
    try:
        run_sweep(FLAGS.model, seeds, FLAGS.output_dir, extra_flags, FLAGS.launcher, FLAGS.train_module,
                  outcomes=outcomes)
    except SweepInterrupted as stop:
        print(f"\n=== sweep interrupted during seed {stop.seed} by {signal.Signals(stop.signum).name}: that run was "
              f"stopped, later seeds were not run", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print("\n=== sweep interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if outcomes:
            print_summary(FLAGS.model, outcomes, FLAGS.output_dir)
    return EXIT_RUN_FAILED if any(o.failed for o in outcomes) else EXIT_OK


def run():
    """Console-script entry point (setup.py)."""
    define_flags()
    entry.run(main, takes_arguments=True)


if __name__ == "__main__":
    run()
