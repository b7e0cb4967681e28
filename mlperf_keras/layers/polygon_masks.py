"""Polygon ground truth rasterised on ROI grids in the graph (keras.ops, TensorFlow and JAX, static shapes).

The reference's mask targets (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/
maskrcnn_benchmark/modeling/roi_heads/mask_head/loss.py project_masks_on_boxes -> structures/segmentation_mask.py
Polygons.crop, resize, convert): each polygon is shifted by the proposal's (x1, y1), scaled by (M / w, M / h) with
w = max(x2 - x1, 1), h = max(y2 - y1, 1), and rasterised at M x M by pycocotools (frPyObjects, merge, decode).
Here the same shift and scale, then an even-odd crossing test at each cell centre (j + 0.5, i + 0.5) of the
scaled edges. pycocotools' rasteriser is a different discretisation (vertices rounded to a 1/5 px grid, boundary
pixels decided on that grid), so the two disagree on some boundary cells (measured in tests/test_polygon_masks.py).

An object is a padded edge list: edges (..., E, 5) float32 rows (x0, y0, x1, y1, part), every polygon part's edges,
the last vertex joined to the first, part numbering the object's polygons 0, 1, ...; padding rows have y0 == y1 and
never cross. A cell is inside when it is inside any part (pycocotools' merge takes the union of the parts): per
row, each part's crossings sorted left to right bound its inside spans in pairs.
"""
from __future__ import annotations

from keras import ops


def edge_rows(polygons) -> list[list[float]]:
    """COCO polygons ([[x, y, x, y, ...], ...]) -> their edges [[x0, y0, x1, y1, part], ...] (NumPy-free, for tests
    and data preparation): each part's vertices in order, its last joined to its first."""
    rows = []
    for part, flat in enumerate(polygons):
        xy = [(float(flat[k]), float(flat[k + 1])) for k in range(0, len(flat) - 1, 2)]
        rows += [[*xy[k], *xy[(k + 1) % len(xy)], float(part)] for k in range(len(xy))]
    return rows


def rasterise(edges, rois, size: int):
    """Each object's polygons on its ROI's size x size grid -> (N, size, size) {0, 1} float32.

    edges (N, E, 5) in image pixels (one object per ROI); rois (N, 4) (x1, y1, x2, y2) pixels. Row i, column j is
    inside when the point (j + 0.5, i + 0.5) of the scaled polygons is inside a part (even-odd rule per part)."""
    edges, rois = ops.cast(edges, "float32"), ops.cast(rois, "float32")
    if edges.shape[-2] % 2:                  # crossings pair up: an even count of rows (one more never crosses)
        edges = ops.pad(edges, [(0, 0), (0, 1), (0, 0)])
    x1, y1 = rois[:, 0:1], rois[:, 1:2]
    sx = size / ops.maximum(rois[:, 2:3] - x1, 1.0)                       # Polygons.crop's max(w, 1), then resize
    sy = size / ops.maximum(rois[:, 3:4] - y1, 1.0)
    xa, xb = (edges[..., 0] - x1) * sx, (edges[..., 2] - x1) * sx       # (N, E), in grid cells
    ya, yb = (edges[..., 1] - y1) * sy, (edges[..., 3] - y1) * sy
    part = edges[..., 4][:, None, :]
    centres = ops.arange(size, dtype="float32") + 0.5
    py = centres[None, :, None]                                           # (1, size rows, 1)
    ya, yb, xa, xb = ya[:, None, :], yb[:, None, :], xa[:, None, :], xb[:, None, :]
    spans = ops.not_equal(ya > py, yb > py)                               # (N, rows, E): the edge crosses the row
    dy = ops.where(spans, yb - ya, 1.0)                                   # no 0 / 0 for edges that cannot cross
    # where the edge meets the row, clipped to just outside the grid (no centre lies beyond -1 or size + 1), which
    # keeps part x 64 + x exact enough to sort by part, then x
    crossing = ops.clip(xa + (py - ya) * (xb - xa) / dy, -1.0, size + 1.0)
    key = ops.where(spans, part * 64.0 + crossing, 3.0e38)               # edges that do not cross sort last
    order = ops.argsort(key, axis=-1)
    xs = ops.take_along_axis(ops.where(spans, crossing, size + 1.0), order, axis=-1)
    # each part crosses a row an even number of times (half-open spans): sorted, crossings 2k and 2k + 1 are one
    # part's and bound one of its inside spans; the rows that do not cross pair up at size + 1, beyond every centre
    low, high = xs[..., 0::2][:, :, None, :], xs[..., 1::2][:, :, None, :]
    px = centres[None, None, :, None]
    inside = ops.logical_and(low <= px, px < high)                        # (N, rows, cols, E / 2)
    return ops.cast(ops.any(inside, axis=-1), "float32")


__all__ = ["edge_rows", "rasterise"]
