"""Results a row kernel writes besides its last block's (a quantisation's per-row scale, a residual sum
that the norm then reads, a training forward's saved row statistics): each is stored by a copy block,
so that the block computing it is an intermediate like any other (inlined, computed at the row, kept
in registers) and only the copy writes the result, wherever the row is computed."""
from __future__ import annotations

from tvm.s_tir.dlight.analysis import normalize_prim_func

from .analysis import is_buffer


def written_by_copies(sch, infos) -> tuple[list, list]:
    """Each block but the last that writes a result of the kernel writes a buffer of the kernel
    instead, which the later blocks read, and a copy block stores the result (TVM computes no output
    block at another's loop, and a result in global memory is read back from there). Returns the
    blocks' infos, anew where a copy was made (the last still last), and the copies."""
    params = [p for p in sch.mod["main"].params if is_buffer(p)]
    copies = []
    for n, info in enumerate(infos[:-1]):
        block = info.block_rv
        for index in reversed(range(len(sch.get(block).writes))):
            buffer = sch.get(block).writes[index].source
            if not any(buffer.same_as(p) for p in params):
                continue
            readers = [later.block_rv for later in infos[n + 1:]
                       if any(r.source.same_as(buffer) for r in sch.get(later.block_rv).reads)]
            copies.append(sch.cache_write(block, index, "global", consumer_blocks=readers))
    if not copies:
        return infos, []
    # TVM puts a copy after the kernel's last block, which stays the last of the infos
    infos = normalize_prim_func(sch)
    last = next(info for info in reversed(infos) if not is_copy(sch, info.block_rv, copies))
    return [info for info in infos if info is not last] + [last], copies


def is_copy(sch, block, copies) -> bool:
    """Whether `block` is one of `copies` (block handles of one schedule compare by the block)."""
    stmt = sch.get(block)
    return any(sch.get(copy).same_as(stmt) for copy in copies)
