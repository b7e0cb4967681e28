"""python -m mlperf_keras.train --model=ncf [--data_dir=D] [--flagfile=flags/r740_t4.flags] [--seed=N] ...

Trains one MLPerf workload to its quality target and writes one MLLOG file (plus the resolved config) per run.
Without --data_dir (and without --synthetic) it runs a small built-in demo: data generated in the official raw
format, prepared by data_prep and trained to a demo target. Under horovodrun each process is one worker.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import sys

from absl import flags

# Exit statuses (config.py says what each means): 0 target reached, 2 bad start, 3 diverged, 4 log not written,
# 5 stopped at --max_epochs without the target (entry.py: what absl's own exits become).
from mlperf_keras import entry
from mlperf_keras.config import (EXIT_BAD_START, EXIT_DIVERGED, EXIT_LOG_FAILED, EXIT_NOT_CONVERGED, MODEL_NAMES,
                                 PRECISIONS, RULESETS, SEED_LIMIT, ConfigError, counted)

flags.DEFINE_enum("model", "ncf", list(MODEL_NAMES), "The MLPerf workload to train.")
flags.DEFINE_string("data_dir", None, "A dataset prepared by python -m data_prep.<dataset>. Without it: the "
                    "built-in demo (or --synthetic data).")
flags.DEFINE_string("output_dir", "runs", "Where the MLLOG file and resolved config of each run are written "
                    "(a new file per run; nothing is overwritten).")
flags.DEFINE_integer("seed", None, "Random seed of the run (MLPerf: every run of a result a different seed). "
                     "Default: a fresh random seed, printed and logged.")
flags.DEFINE_enum("ruleset", None, list(RULESETS), "MLPerf round: quality target, eval cadence, epoch numbering, "
                  "and for ResNet the optimizer. Default: the workload's (0.7 for resnet, whose v0.5 SGD step "
                  "schedule no official checker accepts; 0.5 for the others, the round that defines all of them).")
flags.DEFINE_enum("precision", "fp32", list(PRECISIONS), "fp32, or mixed precision fp16 (loss scaling) / bf16.")
flags.DEFINE_integer("batch_size", None, "Global batch size (all workers). Default: the workload's reference "
                     "global batch, or --batch_per_accelerator x workers where the preset sets one.")
flags.DEFINE_list("batch_per_accelerator", [], "Per-worker batch by model that fits one accelerator, as "
                  "model=N pairs (hardware presets set this), e.g. resnet=256,ssd=32.")
flags.DEFINE_integer("max_epochs", None, "Stop after this many epochs (at least 1) if the target is not reached "
                     "(run_stop status aborted, exit status 5). Default: per workload.")
flags.DEFINE_string("hparams", "", "Override workload hyperparameters: key=value,key=value. An unknown key "
                    "lists the valid ones; --dry_run shows them all. Under --division=closed only those the round's "
                    "rules let a closed submission tune, within their constraints (--dry_run lists them).")
flags.DEFINE_bool("synthetic", False, "Random data of the real shapes: measures model and loop, not quality.")
flags.DEFINE_bool("dry_run", False, "Print the resolved configuration, the parameter count, the global batch and "
                  "steps per epoch, then exit without touching data.")
flags.DEFINE_enum("backend", None, ["tensorflow", "jax"], "Keras backend (default: $KERAS_BACKEND or tensorflow). "
                  "On jax, ResNet-50, the Transformer and GNMT train from prepared records without TensorFlow; "
                  "--synthetic runs every workload without it.")
flags.DEFINE_bool("jit_compile", True, "Compile train and predict steps with XLA.")
flags.DEFINE_string("platform", None, "submission_platform: the system's name, e.g. r740_t4 (presets set it). "
                    "Default: the detected accelerator, or cpu.")
flags.DEFINE_string("org", "mlperf_keras", "submission_org.")
flags.DEFINE_enum("division", "closed", ["closed", "open"], "submission_division. closed (default): the "
                  "reference's graph, init, preprocessing, data order and stock random generators. open: also the "
                  "faster deviations each workload lists in the README, and any --hparams (logged as submission_division: "
                  "open).")
flags.DEFINE_enum("status", "onprem", ["onprem", "cloud", "preview", "research"], "submission_status.")
flags.DEFINE_float("peak_tflops", None, "Peak TFLOP/s of one accelerator at --precision (default: known table).")
flags.DEFINE_integer("eval_offset", 0, "Shift the eval cadence by this many epochs (resnet allows 0-3).")
flags.DEFINE_float("progress_seconds", 30.0, "Print an in-epoch progress line at most this often.")
flags.DEFINE_string("backbone_weights", None, "An ImageNet-trained backbone to start from (ssd: the .npz that "
                    "python -m data_prep.ssd_backbone writes from torchvision's ResNet-34, as the reference starts), "
                    "or 'none' to start from random weights. Required for SSD on real data; the demo and "
                    "--synthetic default to none.")
flags.DEFINE_string("cache_dir", os.path.join(os.path.expanduser("~"), ".cache", "mlperf_keras"),
                    "Where the demo data is generated and prepared (once).")
flags.DEFINE_string("checkpoint_dir", None, "Save model and optimizer state here at every epoch end (written "
                    "whole, then renamed; the newest --keep_checkpoints kept) and the final model at run_stop "
                    "(final.npz). Default: no checkpoints.")
flags.DEFINE_integer("keep_checkpoints", 2, "Epoch checkpoints kept in --checkpoint_dir.")
flags.DEFINE_bool("resume", False, "Continue from the newest checkpoint in --checkpoint_dir (same model, seed, "
                  "batch and hparams). A resumed run is logged as such and is NOT a valid MLPerf result.")
flags.DEFINE_string("coordinator_address", None, "JAX across hosts: HOST:PORT where process 0 serves "
                    "jax.distributed (a free port on the first host), the same on every process. With "
                    "--num_processes and --process_id; under srun or mpirun all three come from the launcher.")
flags.DEFINE_integer("num_processes", None, "JAX across hosts: how many processes train together (one per host "
                     "uses every local GPU).")
flags.DEFINE_integer("process_id", None, "JAX across hosts: this process's index, 0 (the one that writes the MLLOG "
                     "file) to --num_processes - 1.")
FLAGS = flags.FLAGS


def _preset_batch(model: str, pairs: list[str]) -> int | None:
    for pair in pairs:
        name, _, value = pair.partition("=")
        if not value.strip().isdigit():
            raise ConfigError(f"--batch_per_accelerator item {pair!r} is not model=N")
        if name.strip() == model:
            return int(value)
    return None


def build_config(values, workload, dist, manifest: dict | None, demo: bool, closed_lock: bool = True):
    """Flags (absl FlagValues or any object with the same attributes) -> the frozen RunConfig.

    closed_lock: under --division=closed, refuse (ConfigError) an --hparams item the closed division may not change
    (compliance.tunable). A demo's own demo_hparams are not the user's items: the lock judges only --hparams."""
    from mlperf_keras import system
    from mlperf_keras.config import RunConfig, SystemInfo, check_hparams, parse_hparam_overrides, quality_target

    defaults = {**workload.reference_hparams(values.ruleset), **workload.dataset_hparams(manifest)}
    if demo:
        defaults.update(workload.demo_hparams)
    overrides = parse_hparam_overrides(values.hparams, defaults)
    hparams = {**defaults, **overrides}
    check_hparams(hparams, workload.dataset_hparams(manifest), getattr(workload, "counts_checked_by_workload", ()),
                  defaults)
    if values.batch_size is not None:
        global_batch = values.batch_size
    else:
        preset = _preset_batch(values.model, values.batch_per_accelerator)
        global_batch = workload.default_global_batch(hparams, dist.world_size, preset)
    if global_batch <= 0:
        raise ConfigError(f"--batch_size must be positive, got {global_batch}")
    if global_batch % (dist.world_size * dist.devices_per_worker):
        raise ConfigError(f"global batch {global_batch} does not split evenly over "
                          f"{counted(dist.world_size, 'worker')} x {counted(dist.devices_per_worker, 'device')}")
    model_name, count, memory = system.detect_accelerators()
    platform = values.platform or (model_name.replace(" ", "_").lower() if count else "cpu")
    peak = values.peak_tflops or (system.peak_tflops(model_name, values.precision) if count else None)
    # One seed for the run on every worker: the logged one (JAX also needs it for identical initial weights).
    seed = values.seed if values.seed is not None else dist.from_chief(secrets.randbelow(SEED_LIMIT))
    config = RunConfig(
        model=values.model, ruleset=values.ruleset, seed=seed, precision=values.precision,
        global_batch_size=global_batch,
        max_epochs=(values.max_epochs if values.max_epochs is not None
                    else workload.default_epochs(hparams, global_batch)),
        hparams=hparams,
        quality_target=workload.demo_target if demo else quality_target(values.model, values.ruleset),
        data_dir=values.data_dir, output_dir=values.output_dir, synthetic=values.synthetic, demo=demo,
        num_workers=dist.world_size, backend=_backend(),
        jit_compile=values.jit_compile and not (demo and not workload.demo_jit_compile),
        submission_org=values.org, submission_division=values.division, submission_status=values.status,
        system=SystemInfo(platform=platform, accelerator_model=model_name,
                          accelerators_per_worker=dist.devices_per_worker if count else 0,
                          accelerator_memory_gb=memory, host_cpu=system.host_cpu(),
                          host_memory_gb=system.host_memory_gb(), peak_tflops=peak, **system.host_cpu_counts()),
        eval_offset=values.eval_offset, progress_seconds=values.progress_seconds,
        backbone_weights=_backbone_weights(values, workload),
        checkpoint_dir=_checkpoint_dir(values), keep_checkpoints=getattr(values, "keep_checkpoints", 2),
        resume=bool(getattr(values, "resume", False)))
    if closed_lock and config.closed_division:
        from mlperf_keras.compliance import tunable

        refusal = tunable.closed_refusal(workload, config, overrides, manifest)
        if refusal:
            raise ConfigError(refusal)
    return config


def _checkpoint_dir(values) -> str | None:
    path = getattr(values, "checkpoint_dir", None)
    return os.path.abspath(path) if path else None


def check_flags(values) -> None:
    """What the flags alone can tell, before any data is read or prepared: ranges, folders we must write to."""
    from mlperf_keras.config import check_run_flags
    from mlperf_keras.mlperf_log import check_output_dir

    check_run_flags(values.seed, values.max_epochs)
    if values.progress_seconds is not None and not values.progress_seconds > 0:
        raise ConfigError(f"--progress_seconds={values.progress_seconds}: must be positive")
    if getattr(values, "keep_checkpoints", 2) < 1:
        raise ConfigError(f"--keep_checkpoints={values.keep_checkpoints}: at least 1")
    checkpoint_dir = getattr(values, "checkpoint_dir", None)
    if getattr(values, "resume", False) and not checkpoint_dir:
        raise ConfigError("--resume needs --checkpoint_dir (the folder of the run to continue)")
    if values.dry_run:
        return
    check_output_dir(values.output_dir)
    if checkpoint_dir:
        check_output_dir(checkpoint_dir, "--checkpoint_dir")


def _backbone_weights(values, workload) -> str | None:
    path = getattr(values, "backbone_weights", None)
    if path is None:
        return None
    if not workload.uses_backbone_weights:
        raise ConfigError(f"--backbone_weights: --model={values.model} trains from scratch; only models with an "
                          f"ImageNet-trained backbone take it")
    if path == "none":   # random weights, asked for explicitly
        return path
    if not os.path.isfile(path):
        raise ConfigError(f"--backbone_weights={path}: no such file")
    return os.path.abspath(path)


def _backend() -> str:
    import keras

    return keras.backend.backend()


def resolve(values, dist, say=print, closed_lock: bool = True):
    """The workload, its manifest (None for synthetic data) and the config, from flag values (closed_lock: see
    build_config)."""
    from mlperf_keras import registry
    from mlperf_keras.inputs.manifest import read_manifest

    check_flags(values)
    workload = registry.get(values.model)
    if values.ruleset is None:
        values = with_values(values, ruleset=workload.default_ruleset)
    demo = values.data_dir is None and not values.synthetic and not values.dry_run
    manifest = None
    if values.data_dir is not None and values.synthetic:
        raise ConfigError("--synthetic and --data_dir exclude each other")
    if demo:
        if dist.is_chief:
            say(f"DEMO: no --data_dir given, so this runs the built-in {values.model} demo: small generated data in "
                f"the official raw format, a reduced model and a demo target. It is not an MLPerf result; for that, "
                f"prepare the real data ({workload.prepare_command}) and pass --data_dir.")
        from data_prep import demos

        data_dir = demos.prepare(workload.name, values.cache_dir, log=say if dist.is_chief else (lambda _: None))
        values = with_values(values, data_dir=data_dir)
    if values.data_dir is not None:
        manifest = read_manifest(values.data_dir, workload.name)
    if getattr(values, "resume", False) and values.seed is None:
        # The resumed run continues the checkpoint's data order, which its seed decides.
        from mlperf_keras import checkpoints

        latest = checkpoints.latest(values.checkpoint_dir)
        if latest is None:
            raise ConfigError(f"--resume: no checkpoint in --checkpoint_dir={values.checkpoint_dir}")
        values = with_values(values, seed=checkpoints.read_header(latest)["seed"])
    config = build_config(values, workload, dist, manifest, demo, closed_lock)
    from mlperf_keras import system

    warning = system.preset_mismatch_warning(values.platform, config.system.accelerator_model)
    if warning and dist.is_chief:
        say(warning)
    return workload, manifest, config


def prepare(values, dist, say=print):
    """resolve(), then every check that needs the config, before the MLPerf log opens: the workload's own ranges,
    the data files against the manifest (present, sizes, row counts; the checksums are on the clock in the loop),
    and a resumed run's checkpoint. A start that fails here writes no MLPerf log."""
    from mlperf_keras.inputs.manifest import check_files

    workload, manifest, config = resolve(values, dist, say)
    workload.check(config, manifest)
    if not values.dry_run and workload.steps_per_epoch(config, manifest) < 1:
        # Else the loop would meet an empty epoch (a StopIteration from the first batch, or an epoch of no steps).
        raise ConfigError(f"--model={config.model}: 0 steps per epoch at global batch {config.global_batch_size}: "
                          f"the training data does not fill one global batch; use a smaller --batch_size")
    if manifest is not None and not values.dry_run:
        check_files(config.data_dir, manifest)
    if config.resume:
        from mlperf_keras import checkpoints

        latest = checkpoints.latest(config.checkpoint_dir)
        if latest is None:
            raise ConfigError(f"--resume: no checkpoint in --checkpoint_dir={config.checkpoint_dir}")
        header = checkpoints.check_compatible(latest, config)
        if header["epoch"] + 1 >= config.max_epochs:
            raise ConfigError(f"--resume: {latest} is after epoch {header['epoch'] + 1} of --max_epochs="
                              f"{config.max_epochs}; nothing is left to train")
    return workload, manifest, config


class _Values:
    """A copy of flag values with some replaced (absl FlagValues are global and stay untouched)."""

    def __init__(self, base, **changes):
        self._base, self._changes = base, changes

    def __getattr__(self, name):
        return self._changes[name] if name in self._changes else getattr(self._base, name)


def with_values(values, **changes):
    """Flag values with some replaced, for entry points that derive settings (the benchmark forces --synthetic)."""
    return _Values(values, **changes)


def dry_run(config, workload, manifest) -> None:
    from mlperf_keras import precision

    precision.set_policy(config.precision)
    model = workload.build_model(config)
    params = sum(int(w.numpy().size) if hasattr(w, "numpy") else int(w.size) for w in model.trainable_weights)
    print(config.to_json())
    print(f"parameters: {params}")
    print(f"global batch: {config.global_batch_size} {workload.batch_unit} ({config.per_worker_batch_size} per "
          f"worker x {counted(config.num_workers, 'worker')})")
    print(f"steps per epoch: {workload.steps_per_epoch(config, manifest)}")
    for line in workload.describe(config):
        print(line)
    from mlperf_keras.compliance import tunable

    print(f"hparams the closed division lets --hparams change (v{config.ruleset} rules; every other one is fixed to "
          f"the reference, and --division=open accepts anything):")
    for key in tunable.tunable_keys(config.model, config.ruleset, config.hparams):
        print(f"  {key}={config.hparams[key]!r}  {tunable.describe(config.model, config.ruleset, key)}")


def print_summary(result) -> None:
    """The run's last stdout line, one JSON object, however it ended."""
    summary = {"status": result.status, "epochs": result.epochs, "quality": result.quality,
               "minutes": round(result.seconds / 60, 3), "log": result.log_path}
    if result.reason:
        summary["reason"] = result.reason
    if result.resumed_from:
        summary["resumed_from"] = result.resumed_from
        summary["valid_mlperf_result"] = False
    print(json.dumps(summary), flush=True)


def main(argv):
    del argv   # entry.run refuses positional arguments
    if FLAGS.backend:
        os.environ["KERAS_BACKEND"] = FLAGS.backend
    from mlperf_keras import quiet

    quiet.apply()
    # A launcher ends the other workers with SIGTERM when one dies: exit through Python so the loop logs
    # run_stop "aborted" instead of leaving a log that ends mid-run.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    from mlperf_keras import distribute
    from mlperf_keras.inputs.manifest import DataError
    from mlperf_keras.mlperf_log import LogWriteError

    try:
        check_flags(FLAGS)  # before the backend and the distribution start
        dist = distribute.create(os.environ.get("KERAS_BACKEND", "tensorflow"), FLAGS.coordinator_address,
                                 FLAGS.num_processes, FLAGS.process_id)
        workload, manifest, config = prepare(FLAGS, dist)
        if FLAGS.dry_run:
            dry_run(config, workload, manifest)
            return 0
        if dist.is_chief:
            print(f"[{config.model}] seed {config.seed}, {dist.describe()}, backend {config.backend}, "
                  f"precision {config.precision}, ruleset {config.ruleset}", flush=True)
        from mlperf_keras import loop

        try:
            result = loop.run(config, workload, dist, manifest)
        except loop.RunStopped as stopped:
            if dist.is_chief:
                print_summary(stopped.result)
            print(f"error: run aborted: {stopped.result.reason}", file=sys.stderr)
            return stopped.exit_status
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_START
    except LogWriteError as e:
        print(f"error: {e}; the run stopped (its log ends at the last complete line)", file=sys.stderr)
        return EXIT_LOG_FAILED
    except Exception as e:
        if type(e).__name__ != "DataLossError" or FLAGS.data_dir is None:
            raise
        # A damaged TFRecord on the sizes-only path (a dataset too large to hash on the clock): name the file.
        from mlperf_keras.inputs import records

        print(f"error: {records.data_loss_message(e, FLAGS.data_dir, manifest)}", file=sys.stderr)
        return EXIT_BAD_START
    if dist.is_chief:
        print_summary(result)
    if result.reason:
        print(f"error: run aborted: {result.reason}", file=sys.stderr)
        return EXIT_DIVERGED
    if result.status != "success" and dist.is_chief:
        # The chief only: it exits after the log is closed, whereas a launcher that sees another worker exit
        # non-zero first may end the chief while it still writes run_stop.
        print(f"not converged: the target was not reached in --max_epochs={config.max_epochs} epochs "
              f"(exit status {EXIT_NOT_CONVERGED})", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return 0


def run_main():
    entry.run(main)


if __name__ == "__main__":
    run_main()
