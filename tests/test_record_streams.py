"""record_streams.prefetched: items in order, errors re-raised, and an early close stops its thread and closes the
source (a chain of stages stops from the end; a thread left decoding at exit aborted a GPU benchmark)."""
import threading

import pytest

from mlperf_keras.inputs import record_streams


def test_prefetched_yields_in_order_and_reraises():
    assert list(record_streams.prefetched(iter(range(50)), 3)) == list(range(50))

    def failing():
        yield 1
        raise ValueError("bad record")

    stream = record_streams.prefetched(failing(), 2)
    assert next(stream) == 1
    with pytest.raises(ValueError, match="bad record"):
        next(stream)


def test_closing_early_stops_the_chain():
    closed = []

    def source():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.append(threading.current_thread().name)

    def decode():   # the shape of the JAX pipelines: a stage that iterates over the stage before it
        for x in record_streams.prefetched(source(), 2, name="inner-stage"):
            yield x * 2

    outer = record_streams.prefetched(decode(), 2, name="outer-stage")
    assert [next(outer) for _ in range(5)] == [0, 2, 4, 6, 8]
    outer.close()
    assert closed == ["inner-stage"]
    assert not [t for t in threading.enumerate() if t.name in ("inner-stage", "outer-stage")]
