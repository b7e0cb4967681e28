"""TFRecord files and tf.train.Example protos read without TensorFlow, for the JAX backend's input pipelines.

A record file, as tf.io.TFRecordWriter writes it, is a sequence of (uint64 length, uint32 masked CRC32C of the
length, data, uint32 masked CRC32C of the data), little-endian, a CRC masked as ((crc >> 15) | (crc << 17)) +
0xa282ead8. Both CRCs of every record are checked, as tf.data.TFRecordDataset does, and a
bad CRC or a truncated file raises DataError naming the file and the record's byte offset.

Hand-written because the TF-free reader on the package index that the JAX path would reach for, `tfrecord`
(vahidk/tfrecord, tfrecord/reader.py at 0194fa2), reads each record's CRC bytes and never checks them, and it
parses Examples through protobuf's generated classes (one more dependency). The wire format of the three messages
an Example is made of is small enough to decode here: parse_example handles packed and unpacked repeated
scalars, as any protobuf parser must. The CRC is google-crc32c's C implementation (Google's maintained CRC32C).
"""
from __future__ import annotations

import struct
from typing import Iterator

import google_crc32c
import numpy as np

from mlperf_keras.inputs.manifest import DataError

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


def masked_crc(data) -> int:
    """The masked CRC32C TFRecord stores beside a record's length and data."""
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def iter_records(path: str, buffer_bytes: int = 1 << 16) -> Iterator[bytes]:
    """The serialized records of one TFRecord file, in file order, each with both CRCs checked.

    A small buffer: a record larger than what is left in it is read straight into its bytes object, while an 8 MiB
    buffer made the reads of 8 interleaved files 3x slower (measured: 52 against 18 CPU-us per 40 KB record)."""
    try:
        f = open(path, "rb", buffering=buffer_bytes)
    except OSError as e:
        raise DataError(f"{path}: cannot read record file ({e.strerror})") from None
    with f:
        offset = 0
        while True:
            header = f.read(_HEADER.size)
            if not header:
                return
            if len(header) < _HEADER.size:
                raise DataError(f"{path}: truncated TFRecord at byte {offset} (a {len(header)}-byte header, "
                                f"12 needed); prepare the data again")
            length, length_crc = _HEADER.unpack(header)
            if masked_crc(header[:8]) != length_crc:
                raise DataError(f"{path}: corrupt TFRecord at byte {offset} (the length's CRC does not match); "
                                f"prepare the data again")
            data = f.read(length)
            footer = f.read(_FOOTER.size)
            if len(data) < length or len(footer) < _FOOTER.size:
                raise DataError(f"{path}: truncated TFRecord at byte {offset} (a {length}-byte record, the file "
                                f"ends first); prepare the data again")
            if masked_crc(data) != _FOOTER.unpack(footer)[0]:
                raise DataError(f"{path}: corrupt TFRecord at byte {offset} (the data's CRC does not match); "
                                f"prepare the data again")
            yield data
            offset += _HEADER.size + length + _FOOTER.size


# ---- tf.train.Example (tensorflow/core/example/{example,feature}.proto) ----
# Example {Features features = 1}; Features {map<string, Feature> feature = 1}, a map being repeated entries
# {string key = 1; Feature value = 2}; Feature {oneof kind {BytesList bytes_list = 1; FloatList float_list = 2;
# Int64List int64_list = 3}}; each list {repeated <type> value = 1}, packed for floats and int64s.

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_BYTES, _FLOAT, _INT64 = 1, 2, 3


class _Malformed(Exception):
    pass


def _varint(buf, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Malformed("bad varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf, start: int, end: int) -> list:
    """(field number, wire type, value) of one message's bytes buf[start:end]; a length-delimited value is the
    (start, end) of its bytes, a varint its int, a fixed32/64 its raw bytes' start.

    A list, and one-byte varints read inline: keys and short lengths are one byte, and a call per varint was half
    the parse time of an ImageNet record (the JAX input pipelines parse every record on the host)."""
    out, pos = [], start
    while pos < end:
        key = buf[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == _LEN:
            size = buf[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = _varint(buf, pos)
            value, pos = (pos, pos + size), pos + size
        elif wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _FIXED32:
            value, pos = pos, pos + 4
        elif wire == _FIXED64:
            value, pos = pos, pos + 8
        else:
            raise _Malformed(f"wire type {wire}")
        if pos > end:
            raise _Malformed("field runs past its message")
        out.append((key >> 3, wire, value))
    return out


def _packed_varints(buf, lo: int, hi: int, out: list):
    if lo < hi and max(buf[lo:hi]) < 0x80:   # every value one byte (labels, flags, small counts): no Python loop
        out.extend(np.frombuffer(buf, np.uint8, hi - lo, lo).tolist())
        return
    pos = lo
    while pos < hi:
        v, pos = _varint(buf, pos)
        out.append(v)


def _list_values(buf, start: int, end: int, kind: int, out: list):
    """Append one BytesList/FloatList/Int64List's values to out (floats as their 4 raw bytes, int64s as ints)."""
    for number, wire, value in _fields(buf, start, end):
        if number != 1:
            continue
        if kind == _BYTES and wire == _LEN:
            out.append(bytes(buf[value[0]:value[1]]))
        elif kind == _FLOAT and wire == _LEN:  # packed
            lo, hi = value
            if (hi - lo) % 4:
                raise _Malformed("packed floats not a multiple of 4 bytes")
            out.append(bytes(buf[lo:hi]))
        elif kind == _FLOAT and wire == _FIXED32:
            out.append(bytes(buf[value:value + 4]))
        elif kind == _INT64 and wire == _LEN:  # packed
            _packed_varints(buf, value[0], value[1], out)
        elif kind == _INT64 and wire == _VARINT:
            out.append(value)
        else:
            raise _Malformed(f"wire type {wire} in a list of kind {kind}")


def _feature(buf, start: int, end: int):
    kind, values = None, []
    for number, wire, value in _fields(buf, start, end):
        if number in (_BYTES, _FLOAT, _INT64) and wire == _LEN:
            if number != kind:  # a oneof: a later member replaces an earlier one; the same member merges
                kind, values = number, []
            _list_values(buf, value[0], value[1], number, values)
    if kind == _BYTES:
        return values
    if kind == _FLOAT:
        return np.frombuffer(b"".join(values), dtype="<f4").astype(np.float32)
    if kind == _INT64:
        # int64 travels as its two's complement in a uint64 varint
        return np.array([v - (1 << 64) if v >= 1 << 63 else v for v in values], dtype=np.int64)
    return []  # a Feature with no kind set: an empty list of any type


def parse_example(serialized, keys=None) -> dict[str, list[bytes] | np.ndarray]:
    """{feature name: values} of a serialized tf.train.Example: bytes_list as a list of bytes, int64_list as an
    int64 array, float_list as a float32 array (a feature with no list set: an empty list). keys: a set of the
    feature names wanted (the rest are skipped unparsed), or None for all. Raises DataError on bytes that are not an
    Example."""
    buf = memoryview(serialized).cast("B") if not isinstance(serialized, (bytes, bytearray)) else serialized
    features: dict = {}
    try:
        for number, wire, value in _fields(buf, 0, len(buf)):
            if number != 1 or wire != _LEN:
                continue
            for entry_number, entry_wire, entry in _fields(buf, value[0], value[1]):
                if entry_number != 1 or entry_wire != _LEN:
                    continue
                key, feature = "", (0, 0)
                for n, w, v in _fields(buf, entry[0], entry[1]):
                    if n == 1 and w == _LEN:
                        key = bytes(buf[v[0]:v[1]]).decode("utf-8")
                    elif n == 2 and w == _LEN:
                        feature = v
                if keys is None or key in keys:
                    features[key] = _feature(buf, feature[0], feature[1])  # a repeated map key: the last one wins
    except (_Malformed, UnicodeDecodeError) as e:
        raise DataError(f"record is not a tf.train.Example ({e})") from None
    return features


__all__ = ["iter_records", "masked_crc", "parse_example"]
