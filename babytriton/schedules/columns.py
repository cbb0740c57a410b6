"""What a reduction over outer or middle axes looks like (`columns`): which of its kept axes are its
inputs' innermost, contiguous ones. OuterReduction (GPU) and CPUOuterReduction share it."""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from .analysis import is_int, reduce_count, uses


@dataclass
class Columns:
    """A reduction block's loops as [outer kept..., contiguous kept..., reduced...] (after Dlight's
    normalisation the spatial loops come first, then the reduced ones): `n_outer` kept axes outside
    the `n_inner` kept axes that every input read along the reduction has innermost, in order."""
    n_outer: int
    n_inner: int
    n_reduced: int


def columns(sch, block) -> Columns | None:
    """The Columns of a reduction whose inputs keep their innermost axis (`x.sum(0)`, `x.amax(1)` of a
    (B, S, H) `x`, `x.sum((0, 2))` of an (A, B, C, D) one), or None: a reduction along the innermost
    axis (a row), a read indexed other than by the loop variables (a reshape seen through, a gather),
    or no read along the reduction at all. Unit axes are skipped: they index nothing."""
    stmt = sch.get(block)
    n_reduced = reduce_count(sch, block)
    kinds = [iv.iter_type for iv in stmt.iter_vars]
    if not n_reduced or kinds != sorted(kinds, key=lambda k: k == tirx.IterVar.CommReduce):
        return None  # not [spatial..., reduced...]
    spatial = [iv for iv in stmt.iter_vars if iv.iter_type != tirx.IterVar.CommReduce]
    reduced = [iv.var for iv in stmt.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    wide = [iv.var for iv in spatial if not is_int(iv.dom.extent, 1)]
    written = [region.source for region in stmt.writes]
    reads = [region for region in stmt.reads if not any(region.source.same_as(w) for w in written)]
    along = [region for region in reads if any(uses(r.min, v) for r in region.region for v in reduced)]
    if not along:
        return None
    n_inner = next((k for k in range(len(wide), 0, -1) if all(_fits(region, wide[-k:]) for region in reads)
                    and any(uses(r.min, v) for region in along for r in region.region for v in wide[-k:])), 0)
    if not n_inner:
        return None
    first = next(i for i, iv in enumerate(spatial) if iv.var.same_as(wide[-n_inner]))
    return Columns(first, len(spatial) - first, n_reduced)


def _fits(region, inner) -> bool:
    """Whether a read indexes the kept variables `inner` with its last non-unit axes, each by its
    variable alone and in order, and with no other axis; or names none of them (a broadcast along
    the columns: a mask per row)."""
    dims = [r.min for r, extent in zip(region.region, region.source.shape) if not is_int(extent, 1)]
    if not any(uses(d, v) for d in dims for v in inner):
        return True
    k = len(inner)
    return len(dims) >= k and all(d.same_as(v) for d, v in zip(dims[-k:], inner)) and \
        not any(uses(d, v) for d in dims[:-k] for v in inner)
