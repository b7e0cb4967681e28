"""python -m mlperf_keras.benchmark --model=X [--synthetic] [--steps=N] [--batch_size=B] [--precision=P] ...

Runs a fixed number of training steps (warm-up and compilation excluded) and prints samples/s per worker and in
total, step time median and p90, and the fraction of the accelerator's peak: training FLOPs per sample x samples/s
over the peak (--peak_tflops, or the preset/known table). Takes the same flags and flagfiles as train.py.
With --synthetic (the default when no --data_dir is given) one batch of the real shapes lives on the device, so it
measures the model and the loop, not the host; it then needs no TensorFlow on the JAX backend.

Three numbers are measured in the same process:
  bare   the compiled train step called back to back (the ceiling of our own code),
  loop   the same step driven by loop.run_epoch, exactly as training runs it,
  step time median/p90   each step timed on its own with a wait for the device (latency, not throughput).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import numpy as np
from absl import app, flags

from mlperf_keras import train as train_cli  # defines the shared training flags
from mlperf_keras.config import ConfigError

flags.DEFINE_integer("steps", 50, "Timed steps per measurement.")
flags.DEFINE_integer("warmup_steps", 5, "Untimed steps first (compilation, autotuning).")
flags.DEFINE_string("json_out", None, "Also write the results as JSON to this file.")
flags.DEFINE_string("save_batch", None, "Also write the measured batch to this .npz (inputs under their names, "
                    "labels as 'labels'), so that a peer can be timed on the same data "
                    "(benchmarks/torch_peers.py --batch_file).")
FLAGS = flags.FLAGS


def _block(value):
    """Wait until the device has produced value (a loss)."""
    return float(value)


def measure(step, batch, steps: int, warmup: int, global_batch: int, num_workers: int) -> dict:
    """Throughput in samples/s, where global_batch is the samples one step processes on all workers."""
    from mlperf_keras import loop

    x, y = batch
    for _ in range(warmup):
        loss = step(x, y)
    _block(loss)

    start = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y)
    _block(loss)
    bare = steps * global_batch / (time.perf_counter() - start)

    start = time.perf_counter()
    loop.run_epoch(step, loop.RepeatedBatch(batch, steps, global_batch).batches(0), steps, global_batch,
                   progress_seconds=float("inf"), say=lambda _: None)
    through_loop = steps * global_batch / (time.perf_counter() - start)

    times = []
    for _ in range(steps):
        t = time.perf_counter()
        _block(step(x, y))
        times.append(time.perf_counter() - t)
    return {"bare_samples_per_s": bare, "loop_samples_per_s": through_loop,
            "loop_samples_per_s_per_worker": through_loop / num_workers,
            "step_ms_median": 1e3 * statistics.median(times), "step_ms_p90": 1e3 * float(np.percentile(times, 90)),
            "loop_vs_bare": through_loop / bare}


def save_batch(path: str, host_batch) -> None:
    x, y = host_batch
    arrays = dict(x) if isinstance(x, dict) else {"inputs": x}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)   # e.g. runs/batch.npz on a fresh clone
    np.savez(path, labels=np.asarray(y), **{k: np.asarray(v) for k, v in arrays.items()})


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if FLAGS.backend:
        os.environ["KERAS_BACKEND"] = FLAGS.backend
    from mlperf_keras import quiet

    quiet.apply()
    from mlperf_keras import distribute, loop
    from mlperf_keras.inputs.manifest import DataError

    try:
        dist = distribute.create(os.environ.get("KERAS_BACKEND", "tensorflow"))
        values = train_cli.with_values(FLAGS, synthetic=FLAGS.synthetic or FLAGS.data_dir is None, dry_run=False)
        workload, manifest, config = train_cli.resolve(values, dist)
        model, step = loop.build(config, workload, dist, manifest)
        if manifest is None:
            source = workload.synthetic_train_data(config, dist)
        else:
            source = workload.train_data(config, dist, manifest)
        host_batch = next(iter(source.batches(0)))
        samples_per_step = workload.samples_in_batch(host_batch, config) * dist.world_size
        batch = step.to_device(host_batch)
        if FLAGS.save_batch and dist.is_chief:
            save_batch(FLAGS.save_batch, host_batch)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = measure(step, batch, FLAGS.steps, FLAGS.warmup_steps, samples_per_step, dist.world_size)
    peak = config.system.peak_tflops
    devices = max(1, config.system.accelerators_per_worker) * dist.world_size
    # FLOPs per sample are the reference model's: a model resized by --hparams gets no FLOP figures.
    flops = workload.train_flops_per_sample * result["loop_samples_per_s"] if not FLAGS.hparams else 0.0
    result.update({
        "model": config.model, "backend": config.backend, "precision": config.precision,
        "global_batch_size": config.global_batch_size, "workers": dist.world_size,
        "accelerator": config.system.accelerator_model, "accelerators": devices,
        "unit": workload.throughput_unit, "train_tflops_per_s": flops / 1e12,
        "fraction_of_peak": flops / (peak * 1e12 * devices) if peak and flops else None,
        "samples_per_step": samples_per_step,
        "batch_shapes": {k: list(getattr(v, "shape", ())) for k, v in
                         (host_batch[0].items() if isinstance(host_batch[0], dict) else [("x", host_batch[0])])},
        "parameters": int(sum(int(getattr(w, "size", 0) or w.numpy().size) for w in model.trainable_weights)),
    })
    if dist.is_chief:
        unit = workload.throughput_unit
        peak_text = (f"{result['fraction_of_peak']:.1%} of {peak:g} TFLOP/s x {devices}"
                     if result["fraction_of_peak"] is not None else "fraction of peak: n/a (no peak, or --hparams)")
        print(f"{config.model} {config.backend} {config.precision} batch {config.global_batch_size} "
              f"({samples_per_step:,} {unit} per step) "
              f"on {devices} x {config.system.accelerator_model}:\n"
              f"  loop  {result['loop_samples_per_s']:,.0f} {unit}/s ({result['loop_samples_per_s_per_worker']:,.0f} "
              f"per worker), {result['loop_vs_bare']:.1%} of bare\n"
              f"  bare  {result['bare_samples_per_s']:,.0f} {unit}/s\n"
              f"  step  median {result['step_ms_median']:.2f} ms, p90 {result['step_ms_p90']:.2f} ms\n"
              f"  {result['train_tflops_per_s']:.2f} TFLOP/s ({peak_text})")
        print(json.dumps(result))
        if FLAGS.json_out:
            with open(FLAGS.json_out, "w") as f:
                json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    app.run(main)
