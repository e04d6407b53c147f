"""The timer of herd.torch's collective benchmarks (bench/herd_torch_*.py)."""
import statistics
import time


def median_ms(fn, calls=1, repeats=5, warmup=0):
    """fn called `warmup` times untimed, then `repeats` times `calls` calls timed: the
    median of the repeats, in ms a call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(times)
