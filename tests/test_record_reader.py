"""The TF-free TFRecord reader against TensorFlow's on the same files: the same records in the same order, the same
feature values for every kind (packed and unpacked, empty lists, negative int64s), and corrupt or truncated files
refused with the file and the record's byte offset named."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
import tensorflow as tf

from data_prep import demo_imagenet, imagenet
from mlperf_keras.inputs import record_reader, records
from mlperf_keras.inputs.manifest import DataError


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        if v < 0x80:
            return bytes(out + bytes([v]))
        out.append((v & 0x7F) | 0x80)
        v >>= 7


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _unpacked_example() -> bytes:
    """An Example whose float and int64 lists are unpacked (one tagged field per value), which TensorFlow's own
    serializer never writes but every protobuf parser must accept."""
    floats = b"".join(_varint(1 << 3 | 5) + struct.pack("<f", v) for v in (1.5, -2.25, 3e-8))
    ints = b"".join(_varint(1 << 3 | 0) + _varint(v) for v in (7, -1, 2**40, -(2**63)))
    entries = [("f", _len_field(2, floats)), ("i", _len_field(3, ints)),
               ("b", _len_field(1, _len_field(1, b"x") + _len_field(1, b"")))]
    body = b"".join(_len_field(1, _len_field(1, k.encode()) + _len_field(2, v)) for k, v in entries)
    return _len_field(1, body)


def _tf_values(serialized: bytes) -> dict:
    """What TensorFlow's protobuf parser reads from the same bytes."""
    out = {}
    for name, feature in tf.train.Example.FromString(serialized).features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = None if kind is None else list(getattr(feature, kind).value)
    return out


def _assert_same(ours: dict, theirs: dict):
    assert sorted(ours) == sorted(theirs)
    for name, expected in theirs.items():
        got = ours[name]
        if expected is None:
            assert list(got) == []
        elif isinstance(got, list):
            assert got == expected, name
        else:
            want = np.asarray(expected, dtype=got.dtype)
            assert got.dtype in (np.int64, np.float32) and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.fixture(scope="module")
def record_file(tmp_path_factory):
    """Records of every feature kind written by records.py (TensorFlow's writer), plus one unpacked Example."""
    path = str(tmp_path_factory.mktemp("reader") / "mixed.tfrecord")
    examples = [
        records.example({"image/encoded": records.bytes_feature(b"\xff\xd8\x00jpeg"),
                         "image/class/label": records.int64_feature(-3),
                         "boxes": records.float_feature([0.25, 0.5, 1e30]),
                         "labels": records.int64_list_feature([1, 2**62, -(2**63)]),
                         "masks": records.bytes_list_feature([b"a", b"", b"\x00" * 300])}),
        records.example({"empty_floats": records.float_feature([]), "empty_ints": records.int64_list_feature([]),
                         "empty_bytes": records.bytes_list_feature([]), "unset": tf.train.Feature()}),
        records.example({}),
        _unpacked_example(),
        records.example({"big": records.bytes_feature(os.urandom(200_000))}),
    ]
    with records.writer(path) as w:
        for e in examples:
            w.write(e)
    return path


def test_same_records_and_values_as_tensorflow(record_file):
    ours = list(record_reader.iter_records(record_file))
    theirs = [t.numpy() for t in tf.data.TFRecordDataset(record_file)]
    assert ours == theirs and len(ours) == 5
    for serialized in ours:
        _assert_same(record_reader.parse_example(serialized), _tf_values(serialized))
    unpacked = record_reader.parse_example(ours[3])
    np.testing.assert_array_equal(unpacked["i"], np.array([7, -1, 2**40, -(2**63)], dtype=np.int64))
    assert unpacked["f"].dtype == np.float32 and unpacked["b"] == [b"x", b""]
    empty = record_reader.parse_example(ours[1])
    assert empty["empty_floats"].dtype == np.float32 and empty["empty_floats"].shape == (0,)
    assert empty["empty_ints"].dtype == np.int64 and empty["empty_bytes"] == [] and empty["unset"] == []


def test_prepared_imagenet_shards_read_as_tensorflow_reads_them(tmp_path):
    demo_imagenet.write_raw(str(tmp_path / "raw"), num_classes=2, train_per_class=3, val_images=2, size=(24, 20),
                            oddities=False, seed=5)
    imagenet.prepare(str(tmp_path / "raw"), str(tmp_path / "out"), train_shards=2, val_shards=1, num_workers=0,
                     log=lambda _: None)
    shards = sorted(f for f in os.listdir(tmp_path / "out") if not f.endswith((".json", ".txt")))
    assert shards
    total = 0
    for name in shards:
        path = str(tmp_path / "out" / name)
        ours = list(record_reader.iter_records(path))
        assert ours == [t.numpy() for t in tf.data.TFRecordDataset(path)]
        for serialized in ours:
            _assert_same(record_reader.parse_example(serialized), _tf_values(serialized))
        total += len(ours)
    assert total == 2 * 3 + 2


def _corrupt_copy(src: str, dst, edit) -> str:
    data = bytearray(open(src, "rb").read())
    data = edit(data)
    dst.write_bytes(bytes(data))
    return str(dst)


def _second_record_offset(path: str) -> int:
    length = struct.unpack("<Q", open(path, "rb").read(8))[0]
    return 8 + 4 + length + 4


def test_flipped_data_byte_refused_with_file_and_offset(record_file, tmp_path):
    at = _second_record_offset(record_file)

    def flip(data):
        data[at + 12 + 3] ^= 0x01  # inside the second record's data
        return data
    path = _corrupt_copy(record_file, tmp_path / "flipped.tfrecord", flip)
    with pytest.raises(tf.errors.DataLossError):  # TensorFlow refuses it too
        list(tf.data.TFRecordDataset(path))
    with pytest.raises(DataError, match=rf"flipped\.tfrecord: corrupt TFRecord at byte {at} \(the data's CRC"):
        list(record_reader.iter_records(path))


def test_flipped_length_byte_refused(record_file, tmp_path):
    def flip(data):
        data[1] ^= 0x40
        return data
    path = _corrupt_copy(record_file, tmp_path / "length.tfrecord", flip)
    with pytest.raises(DataError, match=r"length\.tfrecord: corrupt TFRecord at byte 0 \(the length's CRC"):
        list(record_reader.iter_records(path))


@pytest.mark.parametrize("cut", [5, 30, 1])
def test_truncated_file_refused_with_file_named(record_file, tmp_path, cut):
    path = _corrupt_copy(record_file, tmp_path / "cut.tfrecord", lambda data: data[:-cut])
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(path))
    with pytest.raises(DataError, match=r"cut\.tfrecord: truncated TFRecord at byte \d+"):
        list(record_reader.iter_records(path))


def test_missing_file_and_non_example_bytes_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="nothere.tfrecord: cannot read"):
        list(record_reader.iter_records(str(tmp_path / "nothere.tfrecord")))
    with pytest.raises(DataError, match="not a tf.train.Example"):
        record_reader.parse_example(b"\x0a\x05\x0a\x03")  # a field that runs past its message


def test_masked_crc_is_what_tensorflow_writes(tmp_path):
    """Both stored CRCs of records written by tf.io.TFRecordWriter, an empty one and a short one."""
    path = str(tmp_path / "crc.tfrecord")
    with records.writer(path) as w:
        w.write(b"")
        w.write(b"mlperf")
    data = open(path, "rb").read()
    assert record_reader.masked_crc(data[0:8]) == struct.unpack("<I", data[8:12])[0]
    assert record_reader.masked_crc(b"") == struct.unpack("<I", data[12:16])[0]
    assert record_reader.masked_crc(data[16:24]) == struct.unpack("<I", data[24:28])[0]
    assert data[28:34] == b"mlperf"
    assert record_reader.masked_crc(b"mlperf") == struct.unpack("<I", data[34:38])[0]
