"""How the step benchmarks time a jitted JAX function: calls back to back with one wait at the end, so the device
queue stays full as in training and the host's dispatch overlaps the device's work."""
from __future__ import annotations

import time


def timed(fn, *args, steps: int, warmup: int = 2, repeats: int = 1) -> tuple[float, float]:
    """fn(*args) called once (it compiles), `warmup` more times, then `repeats` runs of `steps` calls back to back,
    each awaited once at its end. -> (median milliseconds per call over the runs, seconds of the first call)."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first_s = time.perf_counter() - start
    if warmup:
        for _ in range(warmup):
            out = fn(*args)
        jax.block_until_ready(out)
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            out = fn(*args)
        jax.block_until_ready(out)
        runs.append(1e3 * (time.perf_counter() - start) / steps)
    return sorted(runs)[len(runs) // 2], first_s
