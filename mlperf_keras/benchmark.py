"""python -m mlperf_keras.benchmark --model=X [--synthetic | --data_dir=D | --demo] [--steps=N] [--batch_size=B] ...

Runs a fixed number of training steps (warm-up and compilation excluded) and prints samples/s per worker and in
total, step time median and p90, and the fraction of the accelerator's peak: training FLOPs per sample x samples/s
over the peak (--peak_tflops, or the preset/known table). Takes the same flags and flagfiles as train.py.
With --synthetic (the default when no --data_dir is given) one batch of the real shapes lives on the device, so it
measures the model and the loop, not the host; it then needs no TensorFlow on the JAX backend.
It writes no MLPerf log, so it times an --hparams item the closed division may not change (train refuses it) and
says so: a note line, and "division": "open" in the result (compliance.tunable decides).

With --decode_batches=N (translation workloads) it times the evaluation's beam search instead: N batches of the
eval set (synthetic without --data_dir) of its most common padded source length, one compile, through the
workload's evaluator exactly as an epoch's evaluation runs it (search, detokenisation), and prints sentences/s of
the second pass.

Three numbers are measured in the same process:
  bare   the compiled train step called back to back (the ceiling of our own code),
  loop   the same step driven by loop.run_epoch, exactly as training runs it,
  step time median/p90   each step timed on its own with a wait for the device (latency, not throughput).

With --data_dir (prepared records) the batch above is the pipeline's first, and two more numbers follow:
  fed       the step fed by the workload's real input pipeline (the batches training would get, decoded and
            augmented as they arrive), after every shape of the same batches was compiled (JAX: all at once, on
            several threads) and an untimed pass over them;
  resident  the same batches copied to the device first, then stepped back to back: what the step does on
            exactly that mix of shapes. fed / resident is the share of the step the input pipeline keeps up with.
            Per fed batch, the time the loop waited for the pipeline's next batch and the time the step call took
            to return (dispatch; it grows when the device's queue is full): waiting means the pipeline is behind,
            a dispatch near the step's time with little waiting means the device is the bound.
Host CPU is the process's user + system time over the wall time (cores busy; threads included, and processes
the pipeline started and already waited for).
With --input_only the model is not built: the input pipeline alone, its samples/s and host CPU-ms per sample.

With --demo it times what `python -m mlperf_keras.train --model=X` without --data_dir trains (the built-in demo:
its reduced model, hparams, batch and prepared data, the same code path), fed from the demo data as above, and
also what the demo's time-to-train holds besides steady steps, in "demo" of the result: the start-up on the clock
(file checks, the training data and the evaluator set up, and under v0.5 the model's construction and the
batch shapes a JAX run compiles ahead, loop.compile_ahead), the first step (its compilation where not ahead), one evaluation pass over the demo's eval set timed twice (the first compiles), the epoch's
steps and samples and the epochs after which the demo evaluates. python -m mlperf_keras.estimate reads them.

This module is over 400 lines on purpose: one command's measurements (training, fed, input alone, decoding,
the demo's other parts) share its set-up, its printing and its JSON.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

import numpy as np
from absl import flags

from mlperf_keras import entry
from mlperf_keras import train as train_cli  # defines the shared training flags
from mlperf_keras.config import EXIT_DIVERGED, ConfigError

flags.DEFINE_integer("steps", 50, "Timed steps per measurement.")
flags.DEFINE_integer("warmup_steps", 5, "Untimed steps first (compilation, autotuning).")
flags.DEFINE_string("json_out", None, "Also write the results as JSON to this file.")
flags.DEFINE_string("save_batch", None, "Also write the measured batch to this .npz (inputs under their names, "
                    "labels as 'labels'), so that a peer can be timed on the same data "
                    "(benchmarks/torch_peers.py --batch_file).")
flags.DEFINE_bool("input_only", False, "With --data_dir: time the input pipeline alone (no model): samples/s, host "
                  "CPU-ms per sample and cores busy.")
flags.DEFINE_integer("decode_batches", 0, "Time beam-search decoding instead of training (gnmt, transformer): this "
                     "many eval batches of the eval set's most common padded source length.")
flags.DEFINE_bool("demo", False, "Time the built-in demo (what train runs without --data_dir: its model, hparams, "
                  "batch and data), fed from its data, plus its start-up and one evaluation pass, for "
                  "python -m mlperf_keras.estimate.")
FLAGS = flags.FLAGS


class NonFiniteLoss(Exception):
    """The timed steps reached a non-finite loss: a diverged state's timings measure NaN arithmetic (data-dependent
    loops such as NMS run differently on NaN boxes), not the workload."""


def _block(value):
    """Wait until the device has produced value (a loss); NonFiniteLoss if it is not finite."""
    loss = float(value)
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"the loss became {loss} during the benchmark's steps")
    return loss


def measure(step, batch, steps: int, warmup: int, global_batch: int, num_workers: int) -> dict:
    """Throughput in samples/s, where global_batch is the samples one step processes on all workers; first_step_s is
    the first call's seconds (tracing, compilation and one step)."""
    from mlperf_keras import loop
    from mlperf_keras.interfaces import RepeatedBatch

    x, y = batch
    start = time.perf_counter()
    loss = step(x, y)   # the first call traces and compiles the step
    _block(loss)
    first_step_s = time.perf_counter() - start
    for _ in range(warmup - 1):
        loss = step(x, y)
    _block(loss)

    start = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y)
    _block(loss)
    bare = steps * global_batch / (time.perf_counter() - start)

    start = time.perf_counter()
    loop.run_epoch(step, RepeatedBatch(batch, steps, samples_per_epoch=steps * global_batch).batches(0), steps,
                   global_batch, progress_seconds=float("inf"), say=lambda _: None)
    through_loop = steps * global_batch / (time.perf_counter() - start)

    times = []
    for _ in range(steps):
        t = time.perf_counter()
        last_loss = _block(step(x, y))
        times.append(time.perf_counter() - t)
    # The last loss shows the timed steps trained on finite numbers (fp16's loss scaling, a diverging LR).
    return {"last_loss": last_loss, "first_step_s": first_step_s, "bare_samples_per_s": bare,
            "loop_samples_per_s": through_loop,
            "loop_samples_per_s_per_worker": through_loop / num_workers,
            "step_ms_median": 1e3 * statistics.median(times), "step_ms_p90": 1e3 * float(np.percentile(times, 90)),
            "loop_vs_bare": through_loop / bare}


def _stream(source):
    """The pipeline's batches, epoch after epoch (a benchmark may time more batches than an epoch holds)."""
    import itertools

    for epoch in itertools.count():
        yield from source.batches(epoch)


def _host_cpu_s() -> float:
    """CPU seconds of this process and its children, running ones included (the input worker processes live as
    long as the benchmark; getrusage counts a child only once it has exited)."""
    import multiprocessing
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    ticks = os.sysconf("SC_CLK_TCK")
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks   # utime, stime (fields 14 and 15 of proc(5))
    return total


def _wait_for(batch):
    """Block until a batch the pipeline left on the device (the JAX GPU pipelines) is there."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        jax.block_until_ready(batch)


def measure_input(source, count_samples, steps: int, warmup: int) -> dict:
    """The input pipeline alone: `warmup` batches untimed (start-up: file opening, shuffle buffers), then `steps`
    (at least one)."""
    import itertools

    batches = _stream(source)
    first = next(batches)
    for batch in itertools.islice(batches, max(0, warmup - 1)):
        pass
    cpu, start, samples = _host_cpu_s(), time.perf_counter(), 0
    for batch in itertools.islice(batches, max(1, steps)):
        samples += count_samples(batch)
    _wait_for(batch)
    seconds, cpu = time.perf_counter() - start, _host_cpu_s() - cpu
    return {"input_samples_per_s": samples / seconds, "input_host_cpu_ms_per_sample": 1e3 * cpu / samples,
            "input_host_cores_busy": cpu / seconds, "input_batches": max(1, steps), "input_samples": samples,
            "batch_shapes": _batch_shapes(first)}


def _batch_shapes(batch) -> dict:
    x = batch[0]
    return {k: list(getattr(v, "shape", ())) for k, v in (x.items() if isinstance(x, dict) else [("x", x)])}


def _singular(unit: str) -> str:
    return unit[:-1] if unit.endswith("s") else unit


def precompile(step, batches, say=None) -> dict:
    """Compile the step ahead for every distinct shape among batches (an iterable; one batch per shape is kept),
    concurrently where the step can (steps._JaxTrainStep.precompile: the translation workloads' batches take a shape
    per length bucket, and compiling those one after another took minutes); its precompile_* entries of the result,
    none where the step compiles at its first call per shape (TensorFlow)."""
    if not hasattr(step, "precompile"):
        return {}
    result = step.precompile(batches, say=say)
    return {"precompile_shapes": result["compiled"], "precompile_threads": result["threads"],
            "precompile_s": result["seconds"]}


def measure_fed(step, source, count_samples, steps: int, warmup: int, say=None) -> dict:
    """The step fed by the input pipeline against the same batches resident on the device (see the module doc)."""
    import itertools

    def run(batches):
        loss = None
        for x, y in batches:
            loss = step(x, y)
        return _block(loss)

    # The batches to come (the stream starts over the same way each time) compiled ahead, one per shape; then stepped
    # through once, untimed (without precompile, the pass that compiles their shapes one after another).
    compiled = precompile(step, itertools.islice(_stream(source), warmup + steps), say)
    run(itertools.islice(_stream(source), warmup + steps))
    batches = _stream(source)
    run(itertools.islice(batches, warmup))
    cpu, start, samples, seen = _host_cpu_s(), time.perf_counter(), 0, []
    loss, waited, dispatched = None, 0.0, 0.0
    asked = start
    for batch in itertools.islice(batches, steps):
        got = time.perf_counter()
        loss = step(*batch)
        returned = time.perf_counter()
        waited, dispatched = waited + got - asked, dispatched + returned - got
        samples += count_samples(batch)
        seen.append(batch)
        asked = time.perf_counter()
    _block(loss)
    fed_s, cpu = time.perf_counter() - start, _host_cpu_s() - cpu
    resident = [step.to_device(batch) for batch in seen]
    start = time.perf_counter()
    run(resident)
    resident_s = time.perf_counter() - start
    return {**compiled, "fed_samples_per_s": samples / fed_s, "resident_samples_per_s": samples / resident_s,
            "fed_vs_resident": resident_s / fed_s, "fed_host_cores_busy": cpu / fed_s,
            "fed_host_cpu_ms_per_sample": 1e3 * cpu / samples, "fed_batches": steps,
            "fed_wait_ms_per_batch": 1e3 * waited / steps, "fed_dispatch_ms_per_batch": 1e3 * dispatched / steps}


def measure_decode(evaluator, num_batches: int) -> dict:
    """Sentences/s of evaluator.translate() over num_batches of its batches of one padded length (the most common
    one, so one compile); the first pass compiles and is not timed. A model that never emits EOS (random weights)
    decodes every batch to the maximum length: the slowest case."""
    import collections

    length = collections.Counter(n for _, n in evaluator.batches).most_common(1)[0][0]
    chosen = [batch for batch in evaluator.batches if batch[1] == length][:num_batches]
    sentences = sum(int(r >= 0) for rows, _ in chosen for r in rows)
    all_batches, evaluator.batches = evaluator.batches, chosen
    try:
        start = time.perf_counter()
        evaluator.translate()
        first = time.perf_counter() - start
        start = time.perf_counter()
        hypotheses = evaluator.translate()
        seconds = time.perf_counter() - start
    finally:
        evaluator.batches = all_batches
    words = sum(len(h.split()) for h in hypotheses if h)
    return {"decode_sentences_per_s": sentences / seconds, "decode_sentences": sentences,
            "decode_batches": len(chosen), "decode_batch_rows": len(chosen[0][0]), "decode_source_length": length,
            "decode_seconds": seconds, "decode_first_pass_seconds": first, "decode_words_out": words}


def _verify_files(config, dist, manifest) -> float:
    """Seconds of the file check the loop runs on the clock before training (the same call)."""
    from mlperf_keras.inputs.manifest import TRAINING_CHECKSUM_LIMIT_BYTES, verify_files

    started = time.perf_counter()
    verify_files(config.data_dir, manifest, progress=None, checksum_limit_bytes=TRAINING_CHECKSUM_LIMIT_BYTES,
                 rank=dist.rank, world_size=dist.world_size)
    return time.perf_counter() - started


def measure_demo(workload, config, dist, manifest, step, startup: dict, samples_per_step: int) -> dict:
    """What a demo run's time-to-train holds besides its steady steps (the module doc): `startup` holds the seconds
    of the model's construction ("build"), the file check and the training data's set-up, timed by the caller as
    loop.run does them; this times the evaluator's set-up and two passes of its evaluation (on the weights the
    benchmark's steps left), and adds the demo's epoch and evaluation schedule."""
    from mlperf_keras import loop

    step.sync_to_model()
    started = time.perf_counter()
    evaluator = workload.evaluator(config, dist, manifest)
    startup = {**startup, "evaluator": time.perf_counter() - started}
    passes = []
    for _ in range(2):
        started = time.perf_counter()
        evaluator.evaluate(step.predict)
        passes.append(time.perf_counter() - started)
    on_clock = [k for k in startup if k not in ("build", "compile_ahead") or loop.build_on_the_clock(config)]
    steps_per_epoch = workload.steps_per_epoch(config, manifest)
    return {"data_dir": config.data_dir, "ruleset": config.ruleset, "steps_per_epoch": steps_per_epoch,
            "epoch_samples": steps_per_epoch * samples_per_step, "eval_samples": evaluator.num_samples,
            "eval_epochs": [e + 1 for e in loop._eval_epochs(workload, config)], "max_epochs": config.max_epochs,
            "quality_target": config.quality_target, "startup_s": startup, "startup_on_clock": on_clock,
            "startup_on_clock_s": sum(startup[k] for k in on_clock), "first_eval_s": passes[0],
            "eval_s": passes[1]}


def save_batch(path: str, host_batch) -> None:
    x, y = host_batch
    arrays = dict(x) if isinstance(x, dict) else {"inputs": x}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)   # e.g. runs/batch.npz on a fresh clone
    np.savez(path, labels=np.asarray(y), **{k: np.asarray(v) for k, v in arrays.items()})


def main(argv):
    del argv   # entry.run refuses positional arguments
    if FLAGS.backend:
        os.environ["KERAS_BACKEND"] = FLAGS.backend
    from mlperf_keras import quiet

    quiet.apply()
    from mlperf_keras import distribute, loop
    from mlperf_keras.inputs.manifest import DataError

    try:
        dist = distribute.create(os.environ.get("KERAS_BACKEND", "tensorflow"), FLAGS.coordinator_address,
                                 FLAGS.num_processes, FLAGS.process_id)
        if FLAGS.demo and (FLAGS.data_dir is not None or FLAGS.synthetic or FLAGS.input_only or FLAGS.decode_batches):
            raise ConfigError("--demo times the built-in demo on its own data: not with --data_dir, --synthetic, "
                              "--input_only or --decode_batches")
        # Without --data_dir: synthetic data, unless --demo, which resolves the demo as train does (no --data_dir).
        values = train_cli.with_values(FLAGS, synthetic=FLAGS.synthetic or (FLAGS.data_dir is None and not FLAGS.demo),
                                       dry_run=False)
        # No MLPerf result is written here: an --hparams item the closed division may not change is timed, and the
        # result says its configuration is open-division, rather than being refused as train refuses it.
        if FLAGS.input_only and (FLAGS.data_dir is None or FLAGS.decode_batches > 0):
            raise ConfigError("--input_only times the input pipeline of prepared records: give --data_dir, and "
                              "not --decode_batches")
        workload, manifest, config = train_cli.resolve(values, dist, closed_lock=False)
        division = _timed_division(workload, config, dist, manifest)
        if FLAGS.input_only:
            return _input_only_main(workload, config, dist, manifest)
        started = time.perf_counter()
        model, step = loop.build(config, workload, dist, manifest)
        startup = {"build": time.perf_counter() - started}
        if FLAGS.demo:
            # As the demo's run does: the shapes its workload declares compiled before the first batch
            # (loop.compile_ahead). Not for --data_dir, which times steps and compiles only the shapes it steps.
            started = time.perf_counter()
            if loop.compile_ahead(step, workload, config, dist, manifest,
                                  (lambda m: print(m, flush=True)) if dist.is_chief else None):
                startup["compile_ahead"] = time.perf_counter() - started
        if FLAGS.decode_batches > 0:
            return _decode_main(workload, config, dist, manifest)
        if manifest is None:
            source = workload.synthetic_train_data(config, dist)
        else:
            if FLAGS.demo:
                startup["verify_files"] = _verify_files(config, dist, manifest)
            started = time.perf_counter()
            source = workload.train_data(config, dist, manifest)
            startup["train_data"] = time.perf_counter() - started
        host_batch = next(iter(source.batches(0)))
        samples_per_step = workload.samples_in_batch(host_batch, config) * dist.world_size
        batch = step.to_device(host_batch)
        if FLAGS.save_batch and dist.is_chief:
            save_batch(FLAGS.save_batch, host_batch)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        result = measure(step, batch, FLAGS.steps, FLAGS.warmup_steps, samples_per_step, dist.world_size)
    except NonFiniteLoss as e:
        print(f"error: {e}, so no throughput is reported. From random weights at the reference's learning rate a "
              f"model can diverge within a few steps (Mask R-CNN without its pretrained backbone does): give "
              f"--backbone_weights, or a smaller --hparams=learning_rate (the step's work does not depend on it)",
              file=sys.stderr)
        return EXIT_DIVERGED
    if manifest is not None:
        try:
            result.update(measure_fed(step, source, lambda b: workload.samples_in_batch(b, config) * dist.world_size,
                                      FLAGS.steps, FLAGS.warmup_steps,
                                      say=(lambda m: print(m, flush=True)) if dist.is_chief else None))
        except NonFiniteLoss as e:
            print(f"error: {e} while fed from the input pipeline, so no fed throughput is reported", file=sys.stderr)
            return EXIT_DIVERGED
    if FLAGS.demo:
        result["demo"] = measure_demo(workload, config, dist, manifest, step, startup, samples_per_step)
    peak = config.system.peak_tflops
    devices = max(1, config.system.accelerators_per_worker) * dist.world_size
    # FLOPs per sample are the reference model's: a model resized by --hparams (or the demo's) gets no FLOP figures.
    flops = workload.train_flops_per_sample * result["loop_samples_per_s"] if not (FLAGS.hparams or FLAGS.demo) \
        else 0.0
    result.update({
        "model": config.model, "backend": config.backend, "precision": config.precision, "division": division,
        "global_batch_size": config.global_batch_size, "workers": dist.world_size,
        "accelerator": config.system.accelerator_model, "accelerators": devices,
        "unit": workload.throughput_unit, "train_tflops_per_s": flops / 1e12,
        "fraction_of_peak": flops / (peak * 1e12 * devices) if peak and flops else None,
        "samples_per_step": samples_per_step,
        "batch_shapes": _batch_shapes(host_batch),
        "parameters": int(sum(int(getattr(w, "size", 0) or w.numpy().size) for w in model.trainable_weights)),
    })
    if dist.is_chief:
        unit = workload.throughput_unit
        peak_text = (f"{result['fraction_of_peak']:.1%} of {peak:g} TFLOP/s x {devices}"
                     if result["fraction_of_peak"] is not None
                     else "fraction of peak: n/a (no peak, or --hparams, or --demo)")
        print(f"{config.model} {config.backend} {config.precision} batch {config.global_batch_size} "
              f"({samples_per_step:,} {unit} per step) "
              f"on {devices} x {config.system.accelerator_model}:\n"
              f"  loop  {_rate(result['loop_samples_per_s'])} {unit}/s "
              f"({_rate(result['loop_samples_per_s_per_worker'])} "
              f"per worker), {result['loop_vs_bare']:.1%} of bare\n"
              f"  bare  {_rate(result['bare_samples_per_s'])} {unit}/s\n"
              f"  step  median {result['step_ms_median']:.2f} ms, p90 {result['step_ms_p90']:.2f} ms\n"
              f"  {result['train_tflops_per_s']:.2f} TFLOP/s ({peak_text})")
        if "fed_samples_per_s" in result:
            print(f"  fed   {_rate(result['fed_samples_per_s'])} {unit}/s from the input pipeline "
                  f"({result['fed_batches']} batches), {result['fed_vs_resident']:.1%} of the same batches "
                  f"resident on the device ({_rate(result['resident_samples_per_s'])} {unit}/s); host "
                  f"{result['fed_host_cores_busy']:.1f} cores busy, {result['fed_host_cpu_ms_per_sample']:.3g} "
                  f"CPU-ms per {_singular(unit)}; per batch {result['fed_wait_ms_per_batch']:.2f} ms waiting for "
                  f"it, {result['fed_dispatch_ms_per_batch']:.2f} ms in the step call")
        if "demo" in result:
            demo = result["demo"]
            print(f"  demo  {demo['steps_per_epoch']} steps ({demo['epoch_samples']:,} {unit}) per epoch; start-up "
                  f"on the clock {demo['startup_on_clock_s']:.2f} s ({', '.join(demo['startup_on_clock'])}), first "
                  f"step {result['first_step_s']:.2f} s; evaluation of {demo['eval_samples']:,} "
                  f"{demo['eval_s']:.2f} s (first pass {demo['first_eval_s']:.2f} s)")
        _write_json(result)
    return 0


def _input_only_main(workload, config, dist, manifest) -> int:
    source = workload.train_data(config, dist, manifest)
    result = measure_input(source, lambda b: workload.samples_in_batch(b, config), FLAGS.steps, FLAGS.warmup_steps)
    unit = workload.throughput_unit
    result.update({"model": config.model, "backend": config.backend, "unit": unit, "workers": dist.world_size,
                   "global_batch_size": config.global_batch_size})
    if dist.is_chief:
        print(f"{config.model} input pipeline alone ({config.backend}, batch {config.per_worker_batch_size} per "
              f"worker, {result['input_batches']} batches after {FLAGS.warmup_steps} untimed):\n"
              f"  {_rate(result['input_samples_per_s'])} {unit}/s per worker; host {result['input_host_cores_busy']:.1f} "
              f"cores busy, {result['input_host_cpu_ms_per_sample']:.3g} CPU-ms per {_singular(unit)}")
        _write_json(result)
    return 0


def _timed_division(workload, config, dist, manifest) -> str:
    """The division the timed configuration belongs to: open where an --hparams item is not tunable in the closed
    division (compliance.tunable), said once on the chief's stdout."""
    from mlperf_keras.compliance import tunable
    from mlperf_keras.config import parse_hparam_overrides

    if not config.closed_division:
        return config.submission_division
    refusal = tunable.closed_refusal(workload, config, parse_hparam_overrides(FLAGS.hparams, config.hparams),
                                     manifest)
    if refusal is None:
        return "closed"
    if dist.is_chief:
        print(f"note: the timed configuration is open-division ({refusal.split('; tunable there')[0]})", flush=True)
    return "open"


def _rate(value: float) -> str:
    """Whole numbers with thousands separators; three significant digits below 100 (a CPU's 0.102 images/s is not
    0)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _write_json(result: dict) -> None:
    """The result as one JSON line on stdout, and in --json_out."""
    print(json.dumps(result))
    if FLAGS.json_out:
        with open(FLAGS.json_out, "w") as f:
            json.dump(result, f, indent=2)


def _decode_main(workload, config, dist, manifest) -> int:
    if not hasattr(workload, "evaluator") or config.model not in ("gnmt", "transformer"):
        raise ConfigError("--decode_batches times beam search: --model=gnmt or --model=transformer")
    result = measure_decode(workload.evaluator(config, dist, manifest), FLAGS.decode_batches)
    hp = config.hparams
    result.update({"model": config.model, "backend": config.backend, "precision": config.precision,
                   "accelerator": config.system.accelerator_model, "beam_size": hp["beam_size"],
                   "max_decode_length": hp.get("max_decode_length"), "coverage_penalty": hp.get("coverage_penalty"),
                   "workers": dist.world_size})
    if dist.is_chief:
        print(f"{config.model} {config.backend} {config.precision} beam {hp['beam_size']} decoding on "
              f"{config.system.accelerator_model}: {result['decode_sentences_per_s']:,.1f} sentences/s per worker "
              f"({result['decode_sentences']} sentences in {result['decode_batches']} batches of "
              f"{result['decode_batch_rows']}, source length {result['decode_source_length']}; "
              f"{result['decode_seconds']:.2f} s, first pass with compile {result['decode_first_pass_seconds']:.1f} s)")
        _write_json(result)
    return 0


if __name__ == "__main__":
    entry.run(main)
