"""Generate small ImageNet-format raw files (tests, the resnet demo, benchmarks), in the official layout.

ILSVRC2012_img_train.tar is a tar of per-class tars <wnid>.tar holding <wnid>_<n>.JPEG; ILSVRC2012_img_val.tar is
flat (ILSVRC2012_val_<8 digits>.JPEG); validation labels come as a one-wnid-per-line file or as a devkit tarball
(data/ILSVRC2012_validation_ground_truth.txt with ILSVRC2012 class ids + data/meta.mat mapping them to wnids, in an
order that is not the sorted wnid order, as in the real devkit). Each class has its own hue, so a small network can
learn it. Optional oddities, as the real train set has: a PNG and a CMYK JPEG under .JPEG names, a grayscale JPEG,
and (for error tests) a truncated JPEG.
"""
from __future__ import annotations

import colorsys
import io
import os
import tarfile
import tempfile

import numpy as np


def wnid_list(num_classes: int) -> list[str]:
    """Distinct WordNet-style ids, numbered so that creation order is not sorted order."""
    return [f"n{(7_000_000 + 7919 * (num_classes - i)) % 100_000_000:08d}" for i in range(num_classes)]


def class_image(rng, label: int, num_classes: int, size=(64, 48), photo: bool = False) -> np.ndarray:
    """uint8 HxWx3: the class hue with brightness texture; photo=True adds fine detail (JPEG sizes like photos)."""
    width, height = size
    hue = label / num_classes
    r, g, b = colorsys.hsv_to_rgb(hue, 0.8, 0.9)
    base = np.array([r, g, b], np.float32) * 255
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi)
    waves = np.sin(xx / max(width, 1) * 6.0 + phase) * np.cos(yy / max(height, 1) * 4.0)
    shade = 0.75 + 0.25 * waves[..., None]
    image = base * shade + rng.normal(0, 40 if photo else 12, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def _encode(array: np.ndarray, kind: str = "jpeg", quality: int = 90) -> bytes:
    from PIL import Image

    image = Image.fromarray(array, "RGB")
    out = io.BytesIO()
    if kind == "png":
        image.save(out, "PNG")
    elif kind == "cmyk":
        image.convert("CMYK").save(out, "JPEG", quality=quality)
    elif kind == "gray":
        image.convert("L").save(out, "JPEG", quality=quality)
    else:
        image.save(out, "JPEG", quality=quality)
    data = out.getvalue()
    if kind == "truncated":
        data = data[: len(data) // 2]
    return data


def _add(archive: tarfile.TarFile, name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_300_000_000
    archive.addfile(info, io.BytesIO(data))


def _temp_name(path: str) -> str:
    """A fresh file name beside path, for writing it atomically: concurrent writers never share a temp file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".", suffix=".tmp")
    os.close(fd)
    return tmp


def _write_devkit(path: str, wnids: list[str], val_wnids: list[str], rng):
    """A devkit tarball: class ids 1..N assigned in a shuffled order, meta.mat with the 'synsets' struct."""
    from scipy.io import savemat

    ids = {wnid: i + 1 for i, wnid in enumerate(rng.permutation(wnids).tolist())}
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children", "wordnet_height",
              "num_train_images"]
    synsets = np.zeros(len(wnids) + 1, dtype=[(f, "O") for f in fields])
    for row, wnid in enumerate(sorted(wnids, key=ids.get)):
        synsets[row] = (ids[wnid], wnid, f"class {wnid}", "", 0, np.zeros(0), 0, 0)
    # A non-leaf synset after the leaves, as the real meta.mat has (ids > 1000): must be ignored.
    synsets[-1] = (len(wnids) + 1, "n99999999", "an ancestor", "", 2, np.array([1, 2]), 1, 0)
    meta = io.BytesIO()
    savemat(meta, {"synsets": synsets})
    truth = "".join(f"{ids[w]}\n" for w in val_wnids).encode()
    with tarfile.open(path, "w:gz") as devkit:
        _add(devkit, "ILSVRC2012_devkit_t12/data/meta.mat", meta.getvalue())
        _add(devkit, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", truth)


def write_raw(raw_dir: str, num_classes: int = 4, train_per_class: int = 6, val_images: int = 8,
              size=(64, 48), seed: int = 0, oddities: bool = True, corrupt: str | None = None,
              labels: str = "wnids", photo: bool = False, image_fn=None) -> dict:
    """Write the official files into raw_dir; returns what was written (wnids, special names, val wnids).

    image_fn: a function (rng, label) -> uint8 HxWx3 array that makes each image instead of class_image (size and
    photo then unused): benchmarks/real_format_data.py passes crops of real photos.
    oddities: one PNG (class 0), one CMYK JPEG (class 1) and one grayscale JPEG (class 2 or last) under .JPEG names.
    corrupt: None, "train" or "val": one truncated JPEG in that split. labels: "wnids" (a one-wnid-per-line file),
    "devkit" (ILSVRC2012_devkit_t12.tar.gz) or "none".
    """
    rng = np.random.default_rng(seed)
    if image_fn is None:
        image_fn = lambda rng, label: class_image(rng, label, num_classes, size, photo)  # noqa: E731
    os.makedirs(raw_dir, exist_ok=True)
    wnids = wnid_list(num_classes)
    special = {}
    if oddities:
        special = {(0, 0): "png", (min(1, num_classes - 1), 1): "cmyk", (min(2, num_classes - 1), 2): "gray"}
    if corrupt == "train":
        special[(num_classes - 1, train_per_class - 1)] = "truncated"
    info = {"wnids": wnids, "png": [], "cmyk": [], "gray": [], "truncated": [], "train_images": 0}
    train_path = os.path.join(raw_dir, "ILSVRC2012_img_train.tar")
    train_tmp = _temp_name(train_path)
    with tarfile.open(train_tmp, "w") as outer:
        for label in reversed(range(num_classes)):  # not in sorted order: labels must not follow tar order
            inner_bytes = io.BytesIO()
            with tarfile.open(fileobj=inner_bytes, mode="w") as inner:
                for n in range(train_per_class):
                    kind = special.get((label, n), "jpeg")
                    name = f"{wnids[label]}_{1000 + 37 * n}.JPEG"
                    _add(inner, name, _encode(image_fn(rng, label), kind))
                    if kind != "jpeg":
                        info[kind].append(name)
                    info["train_images"] += 1
            _add(outer, f"{wnids[label]}.tar", inner_bytes.getvalue())
    os.replace(train_tmp, train_path)

    val_labels = [int(rng.integers(num_classes)) for _ in range(val_images)]
    val_path = os.path.join(raw_dir, "ILSVRC2012_img_val.tar")
    val_tmp = _temp_name(val_path)
    with tarfile.open(val_tmp, "w") as archive:
        for i, label in enumerate(val_labels, 1):
            kind = "truncated" if corrupt == "val" and i == val_images else "jpeg"
            name = f"ILSVRC2012_val_{i:08d}.JPEG"
            _add(archive, name, _encode(image_fn(rng, label), kind))
            if kind != "jpeg":
                info[kind].append(name)
    os.replace(val_tmp, val_path)
    info["val_wnids"] = [wnids[label] for label in val_labels]
    if labels == "wnids":
        with open(os.path.join(raw_dir, "ILSVRC2012_validation_labels.txt"), "w") as f:
            f.write("".join(f"{w}\n" for w in info["val_wnids"]))
    elif labels == "devkit":
        _write_devkit(os.path.join(raw_dir, "ILSVRC2012_devkit_t12.tar.gz"), wnids, info["val_wnids"], rng)
    return info
