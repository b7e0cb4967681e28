"""Polygon ground truth rasterised on ROI grids in the graph (keras.ops, TensorFlow and JAX, static shapes).

The reference's mask targets (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/modeling/roi_heads/mask_head/loss.py project_masks_on_boxes -> structures/segmentation_mask.py
Polygons.crop, resize, convert): each polygon is shifted by the proposal's (x1, y1), scaled by (M / w, M / h) with
w = max(x2 - x1, 1), h = max(y2 - y1, 1), and rasterised at M x M by pycocotools (frPyObjects, merge, decode).
Here the same shift and scale, then an even-odd crossing test at each cell centre (j + 0.5, i + 0.5) of the
scaled edges. pycocotools' rasteriser is a different discretisation (vertices rounded to a 1/5 px grid, boundary
pixels decided on that grid), so the two disagree on some boundary cells (measured in tests/test_polygon_masks.py).

An object is a padded edge list: edges (..., E, 4) float32 rows (x0, y0, x1, y1), every polygon part's edges, the
last vertex joined to the first. The parity is taken over all of an object's edges at once, so where two parts of
one object overlap the overlap is outside (pycocotools' merge takes their union); padding rows have y0 == y1 and
never cross.
"""
from __future__ import annotations

from keras import ops


def edge_rows(polygons) -> list[list[float]]:
    """COCO polygons ([[x, y, x, y, ...], ...]) -> their edges [[x0, y0, x1, y1], ...] (NumPy-free, for tests and
    data preparation): each part's vertices in order, its last joined to its first."""
    rows = []
    for flat in polygons:
        xy = [(float(flat[k]), float(flat[k + 1])) for k in range(0, len(flat) - 1, 2)]
        rows += [[*xy[k], *xy[(k + 1) % len(xy)]] for k in range(len(xy))]
    return rows


def rasterise(edges, rois, size: int):
    """Each object's polygons on its ROI's size x size grid -> (N, size, size) {0, 1} float32.

    edges (N, E, 4) in image pixels (one object per ROI); rois (N, 4) (x1, y1, x2, y2) pixels. Row i, column j is
    inside when the point (j + 0.5, i + 0.5) of the scaled polygons is (even-odd rule)."""
    edges, rois = ops.cast(edges, "float32"), ops.cast(rois, "float32")
    x1, y1 = rois[:, 0:1], rois[:, 1:2]
    sx = size / ops.maximum(rois[:, 2:3] - x1, 1.0)                       # Polygons.crop's max(w, 1), then resize
    sy = size / ops.maximum(rois[:, 3:4] - y1, 1.0)
    xa, xb = (edges[..., 0] - x1) * sx, (edges[..., 2] - x1) * sx       # (N, E), in grid cells
    ya, yb = (edges[..., 1] - y1) * sy, (edges[..., 3] - y1) * sy
    centres = ops.arange(size, dtype="float32") + 0.5
    py = centres[None, :, None]                                           # (1, size rows, 1)
    ya, yb, xa, xb = ya[:, None, :], yb[:, None, :], xa[:, None, :], xb[:, None, :]
    spans = ops.not_equal(ya > py, yb > py)                               # (N, rows, E): the edge crosses the row
    dy = ops.where(spans, yb - ya, 1.0)                                   # no 0 / 0 for edges that cannot cross
    crossing = xa + (py - ya) * (xb - xa) / dy                            # x where the edge meets the row
    crossing = ops.where(spans, crossing, -1.0)                           # left of every centre: never counted
    right = crossing[:, :, None, :] > centres[None, None, :, None]       # (N, rows, cols, E): ray to +x
    count = ops.sum(ops.cast(right, "int32"), axis=-1)
    return ops.cast(count % 2, "float32")


__all__ = ["edge_rows", "rasterise"]
