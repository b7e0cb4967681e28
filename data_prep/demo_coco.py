"""Generate small COCO-2017-format raw data (tests, the ssd demo, benchmarks), in the official layout.

raw_dir/annotations/instances_train2017.json, instances_val2017.json and raw_dir/train2017/, val2017/ holding
<12-digit image id>.jpg, as distributed. Each image shows one to three filled rectangles or ellipses on a textured,
low-saturation background; each class has its own colour (so a small detector can learn it) and objects span
10-60% of the image side (object_size). The classes are real COCO categories with ids that leave gaps (1 person,
3 car, 18 dog, 44 bottle, 90 toothbrush) and "categories" lists all 80 official categories (ids 1..90 with gaps), so
the prepared data has 80 classes as the real one does (all_categories=False: only the 5 drawn, for the ssd demo).

What the real files have, and so does this (when there are enough images):
- polygon segmentations, COCO areas (the mask area) and [x, y, w, h] float boxes with two decimals;
- crowd objects (iscrowd=1) with RLE segmentations: in train the uncompressed form ({"counts": [runs...]}) that the
  official instances files use, in val the compressed string form that pycocotools.mask.encode writes (so both are
  exercised);
- an image without annotations in each split;
- a grayscale JPEG (train).
oddities=True adds, for tests, what the real files have rarely or never but preparation must handle: a CMYK JPEG
and a PNG under .jpg names, a box of zero width, and a box reaching past the image border.
"""
from __future__ import annotations

import io
import json
import os
import tempfile

import numpy as np

# (id, name, supercategory) of the 80 COCO 2017 categories, as in the official instances files.
COCO_CATEGORIES = [
    (1, "person", "person"), (2, "bicycle", "vehicle"), (3, "car", "vehicle"), (4, "motorcycle", "vehicle"),
    (5, "airplane", "vehicle"), (6, "bus", "vehicle"), (7, "train", "vehicle"), (8, "truck", "vehicle"),
    (9, "boat", "vehicle"), (10, "traffic light", "outdoor"), (11, "fire hydrant", "outdoor"),
    (13, "stop sign", "outdoor"), (14, "parking meter", "outdoor"), (15, "bench", "outdoor"), (16, "bird", "animal"),
    (17, "cat", "animal"), (18, "dog", "animal"), (19, "horse", "animal"), (20, "sheep", "animal"),
    (21, "cow", "animal"), (22, "elephant", "animal"), (23, "bear", "animal"), (24, "zebra", "animal"),
    (25, "giraffe", "animal"), (27, "backpack", "accessory"), (28, "umbrella", "accessory"),
    (31, "handbag", "accessory"), (32, "tie", "accessory"), (33, "suitcase", "accessory"), (34, "frisbee", "sports"),
    (35, "skis", "sports"), (36, "snowboard", "sports"), (37, "sports ball", "sports"), (38, "kite", "sports"),
    (39, "baseball bat", "sports"), (40, "baseball glove", "sports"), (41, "skateboard", "sports"),
    (42, "surfboard", "sports"), (43, "tennis racket", "sports"), (44, "bottle", "kitchen"),
    (46, "wine glass", "kitchen"), (47, "cup", "kitchen"), (48, "fork", "kitchen"), (49, "knife", "kitchen"),
    (50, "spoon", "kitchen"), (51, "bowl", "kitchen"), (52, "banana", "food"), (53, "apple", "food"),
    (54, "sandwich", "food"), (55, "orange", "food"), (56, "broccoli", "food"), (57, "carrot", "food"),
    (58, "hot dog", "food"), (59, "pizza", "food"), (60, "donut", "food"), (61, "cake", "food"),
    (62, "chair", "furniture"), (63, "couch", "furniture"), (64, "potted plant", "furniture"),
    (65, "bed", "furniture"), (67, "dining table", "furniture"), (70, "toilet", "furniture"),
    (72, "tv", "electronic"), (73, "laptop", "electronic"), (74, "mouse", "electronic"),
    (75, "remote", "electronic"), (76, "keyboard", "electronic"), (77, "cell phone", "electronic"),
    (78, "microwave", "appliance"), (79, "oven", "appliance"), (80, "toaster", "appliance"),
    (81, "sink", "appliance"), (82, "refrigerator", "appliance"), (84, "book", "indoor"), (85, "clock", "indoor"),
    (86, "vase", "indoor"), (87, "scissors", "indoor"), (88, "teddy bear", "indoor"), (89, "hair drier", "indoor"),
    (90, "toothbrush", "indoor"),
]

# The classes drawn, with their colours (far apart in RGB, so colour alone separates them).
DEMO_CLASSES = {1: (220, 30, 30), 3: (30, 200, 40), 18: (40, 60, 230), 44: (235, 215, 30), 90: (210, 40, 220)}
CROWD_CATEGORY = 1  # crowd regions in COCO are mostly groups of people
CROWD_ID_BASE = 900_100_000_000  # official crowd annotation ids are this large (900100000000 + image id)
JPEG_QUALITY = 90


def _sizes(rng, size, n):
    """n (width, height) pairs: size is (W, H), ((W_min, W_max), (H_min, H_max)) or a function rng -> (W, H)."""
    if callable(size):
        return [tuple(int(v) for v in size(rng)) for _ in range(n)]
    width, height = size
    if np.ndim(width) == 0:
        return [(int(width), int(height))] * n
    return [(int(rng.integers(width[0], width[1] + 1)), int(rng.integers(height[0], height[1] + 1)))
            for _ in range(n)]


def _background(rng, width: int, height: int) -> np.ndarray:
    """A grey-brown texture of smooth waves (noise comes on top of the whole image, objects included)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    fx, fy, phase = rng.uniform(3, 9), rng.uniform(3, 9), rng.uniform(0, 2 * np.pi)
    waves = np.sin(xx / width * fx + phase) * np.cos(yy / height * fy)
    base = np.array([125, 118, 108], np.float32) + rng.uniform(-20, 20)
    return base + 30 * waves[..., None]


def _place(rng, width: int, height: int, taken: list, tries: int = 30, object_size=(0.1, 0.6)):
    """A box (x, y, w, h) spanning object_size (fractions) of each image side that does not overlap the boxes
    already placed."""
    for _ in range(tries):
        w, h = rng.uniform(*object_size) * width, rng.uniform(*object_size) * height
        x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
        box = (round(x, 2), round(y, 2), round(w, 2), round(h, 2))
        if all(box[0] >= t[0] + t[2] or t[0] >= box[0] + box[2] or box[1] >= t[1] + t[3] or t[1] >= box[1] + box[3]
               for t in taken):
            return box
    return None


def _polygon(shape: str, box) -> list[float]:
    x, y, w, h = box
    if shape == "rectangle":
        points = [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
    else:
        angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
        points = list(zip(x + w / 2 + w / 2 * np.cos(angles), y + h / 2 + h / 2 * np.sin(angles)))
    return [round(float(v), 2) for point in points for v in point]


def _polygon_area(flat: list[float]) -> float:
    xs, ys = np.asarray(flat[0::2]), np.asarray(flat[1::2])
    return float(0.5 * abs(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))


def _shape_mask(shape: str, box, width: int, height: int) -> np.ndarray:
    """The pixels (centres) inside the shape."""
    x, y, w, h = box
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    if shape == "rectangle":
        return (xx >= x) & (xx < x + w) & (yy >= y) & (yy < y + h)
    return ((xx - x - w / 2) / (w / 2)) ** 2 + ((yy - y - h / 2) / (h / 2)) ** 2 <= 1.0


def _uncompressed_rle(mask: np.ndarray) -> dict:
    """COCO's uncompressed RLE: run lengths over the column-major pixels, starting with a run of zeros."""
    flat = mask.astype(np.uint8).flatten(order="F")
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], changes, [flat.size]])
    runs = np.diff(bounds).tolist()
    if flat[0] == 1:
        runs = [0] + runs
    return {"counts": [int(r) for r in runs], "size": [int(mask.shape[0]), int(mask.shape[1])]}


def _crowd(rng, image: np.ndarray, taken: list, compressed: bool, paint: bool = True):
    """A crowd region: a cluster of small blobs of the crowd class, one RLE mask for all of them (painted in the
    class colour unless paint=False)."""
    from pycocotools import mask as mask_utils

    height, width = image.shape[:2]
    region = _place(rng, width, height, taken)
    if region is None:
        return None
    x, y, w, h = region
    mask = np.zeros((height, width), bool)
    for _ in range(6):
        bw, bh = w * rng.uniform(0.2, 0.4), h * rng.uniform(0.2, 0.4)
        bx, by = x + rng.uniform(0, w - bw), y + rng.uniform(0, h - bh)
        mask |= _shape_mask("ellipse", (bx, by, bw, bh), width, height)
    if not mask.any():
        return None
    if paint:
        image[mask] = DEMO_CLASSES[CROWD_CATEGORY]
    encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    bbox = [round(float(v), 2) for v in mask_utils.toBbox(encoded)]
    area = float(mask_utils.area(encoded))
    if compressed:
        segmentation = {"counts": encoded["counts"].decode("ascii"), "size": [int(v) for v in encoded["size"]]}
    else:
        segmentation = _uncompressed_rle(mask)
    taken.append(tuple(bbox))
    return {"segmentation": segmentation, "area": area, "iscrowd": 1, "bbox": bbox,
            "category_id": CROWD_CATEGORY}


def _encode(array: np.ndarray, kind: str) -> bytes:
    from PIL import Image

    image = Image.fromarray(array, "RGB")
    out = io.BytesIO()
    if kind == "gray":
        image.convert("L").save(out, "JPEG", quality=JPEG_QUALITY)
    elif kind == "cmyk":
        image.convert("CMYK").save(out, "JPEG", quality=JPEG_QUALITY)
    elif kind == "png":
        image.save(out, "PNG")
    else:
        image.save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def _split(rng, image_dir: str, ids: list[int], sizes: list, special: dict, annotation_ids, photo: bool,
           max_objects: int, object_size, photos=None):
    """Write one split's images; its (images, annotations) entries."""
    os.makedirs(image_dir, exist_ok=True)
    classes = sorted(DEMO_CLASSES)
    images, annotations = [], []
    for n, (image_id, (width, height)) in enumerate(zip(ids, sizes)):
        kind = special.get(n, "plain")
        pixels = _background(rng, width, height) if photos is None else photos(rng, width, height).astype(np.float32)
        taken, objects = [], []
        if kind == "crowd" or kind == "crowd_string":
            crowd = _crowd(rng, pixels, taken, compressed=kind == "crowd_string", paint=photos is None)
            if crowd is not None:
                crowd["id"] = CROWD_ID_BASE + image_id
                objects.append(crowd)
        if kind != "empty":
            for _ in range(int(rng.integers(1, max_objects + 1))):
                box = _place(rng, width, height, taken, object_size=object_size)
                if box is None:
                    break
                taken.append(box)
                category = classes[int(rng.integers(len(classes)))]
                shape = "rectangle" if rng.random() < 0.5 else "ellipse"
                if photos is None:
                    mask = _shape_mask(shape, box, width, height)
                    # Class colour with a little shading, so the shape is not one flat value.
                    pixels[mask] = np.asarray(DEMO_CLASSES[category], np.float32) * rng.uniform(0.85, 1.0)
                polygon = _polygon(shape, box)
                objects.append({"segmentation": [polygon], "area": round(_polygon_area(polygon), 2), "iscrowd": 0,
                                "bbox": list(box), "category_id": category, "id": next(annotation_ids)})
        if kind == "odd_boxes" and objects:
            # A box of zero width (dropped by preparation) and one reaching past the right and bottom border
            # (clipped): the official files have slivers of zero size after rounding and boxes touching the edge.
            x, y = objects[0]["bbox"][:2]
            objects.append({"segmentation": [[x, y, x, y + 5, x, y + 10]], "area": 0.0, "iscrowd": 0,
                            "bbox": [x, y, 0.0, 10.0], "category_id": classes[0], "id": next(annotation_ids)})
            objects.append({"segmentation": [[width - 10.0, height - 10.0, width + 20.0, height - 10.0,
                                              width + 20.0, height + 20.0]], "area": 450.0, "iscrowd": 0,
                            "bbox": [width - 10.0, height - 10.0, 30.0, 30.0], "category_id": classes[-1],
                            "id": next(annotation_ids)})
        if photos is None:
            # Grey noise over everything (photo=True: strong fine detail, so JPEG sizes are like photos').
            pixels += rng.normal(0, 30 if photo else 8, (height, width, 1)).astype(np.float32)
        array = np.clip(pixels, 0, 255).astype(np.uint8)
        encoding = {"gray": "gray", "cmyk": "cmyk", "png": "png"}.get(kind, "jpeg")
        file_name = f"{image_id:012d}.jpg"
        with open(os.path.join(image_dir, file_name), "wb") as f:
            f.write(_encode(array, encoding))
        images.append({"license": 1, "file_name": file_name, "coco_url": "", "height": height, "width": width,
                       "date_captured": "2013-11-14 17:02:52", "flickr_url": "", "id": image_id})
        for obj in objects:
            annotations.append({**obj, "image_id": image_id})
    return images, annotations


def write_raw(raw_dir: str, num_train: int = 64, num_val: int = 16, size=((256, 384), (192, 288)), seed: int = 0,
              oddities: bool = False, photo: bool = False, max_objects: int = 3, object_size=(0.1, 0.6),
              all_categories: bool = True, photos=None) -> dict:
    """Write the official layout into raw_dir; returns what is where (file names of the special images, counts).

    size: (W, H) for every image, or ((W_min, W_max), (H_min, H_max)) for sizes drawn per image. Special images
    (first images of a split, in annotation-file order): train 0 grayscale, 1 without annotations, 2 with a crowd
    region (uncompressed RLE); val 0 with a crowd region (compressed RLE), 1 without annotations. oddities=True:
    train 3 is a CMYK JPEG, train 4 a PNG (both named .jpg), train 5 has a zero-width and a border-crossing box.
    object_size: the (min, max) fraction of each image side an object spans. all_categories=False lists only the
    drawn classes in "categories" (still COCO ids with gaps), so the prepared data has 5 classes, not 80.
    photos: a function (rng, width, height) -> uint8 HxWx3 array (benchmarks/real_format_data.py: real photos): each
    image is that picture as it is, and the objects (boxes, polygons, crowd RLE) are annotated on it without being
    painted in (photo then unused).
    """
    rng = np.random.default_rng(seed)
    annotation_ids = iter(range(100_000 + 1000 * seed, 10**9))
    # Image ids like the official ones (up to 6 digits, sparse), not in file order.
    all_ids = rng.choice(np.arange(1, 600_000), size=num_train + num_val, replace=False).tolist()
    train_special = {0: "gray", 1: "empty", 2: "crowd"}
    if oddities:
        train_special.update({3: "cmyk", 4: "png", 5: "odd_boxes"})
    val_special = {0: "crowd_string", 1: "empty"}
    info = {"train": {}, "val": {}}
    sizes = _sizes(rng, size, num_train + num_val)
    os.makedirs(os.path.join(raw_dir, "annotations"), exist_ok=True)
    categories = [{"supercategory": sup, "id": cid, "name": name} for cid, name, sup in COCO_CATEGORIES
                  if all_categories or cid in DEMO_CLASSES]
    for split, ids, split_sizes, special in (("train", all_ids[:num_train], sizes[:num_train], train_special),
                                             ("val", all_ids[num_train:], sizes[num_train:], val_special)):
        images, annotations = _split(rng, os.path.join(raw_dir, f"{split}2017"), ids, split_sizes, special,
                                     annotation_ids, photo, max_objects, object_size, photos)
        document = {"info": {"description": "COCO-format demo data (generated)", "version": "1.0", "year": 2017},
                    "licenses": [{"url": "", "id": 1, "name": "generated"}],
                    "images": images, "annotations": annotations, "categories": categories}
        path = os.path.join(raw_dir, "annotations", f"instances_{split}2017.json")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:  # a temp name of its own: concurrent writers never share one
            json.dump(document, f)
        os.replace(tmp, path)
        names = [image["file_name"] for image in images]
        info[split] = {"images": len(images), "annotations": len(annotations),
                       **{kind: [names[n]] for n, kind in special.items() if n < len(names)}}
    return info
