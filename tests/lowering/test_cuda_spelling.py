"""cuda_spelling: a CUDA kernel's TIR rewritten so that TVM's code generator prints what nvcc accepts,
with the same values: the rewritten kernel compiled with nvcc, and run on the CPU against torch."""
import shutil

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script import tirx as T

from babytriton.lowering import cuda_spelling, pipeline

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})


def splats(dtype: str, value: int) -> tirx.PrimFunc:
    """A kernel of one thread storing its input over 16 and 4 bytes of lanes, then `value` over 16 and 8."""
    c, lanes = tirx.const(value, dtype), 128 // tvm.DataType(dtype).bits

    @T.prim_func
    def kernel(a: T.Buffer((1,), dtype), b: T.Buffer((lanes * 2 + lanes // 2 + lanes // 4,), dtype)):
        T.func_attr({"global_symbol": "splats", "tirx.noalias": True})
        for t in T.thread_binding(1, thread="threadIdx.x"):
            b[T.Ramp(t, 1, lanes)] = T.Broadcast(a[t], lanes)
            b[T.Ramp(t + lanes, 1, lanes // 4)] = T.Broadcast(a[t], lanes // 4)
            b[T.Ramp(t + lanes + lanes // 4, 1, lanes)] = T.Broadcast(c, lanes)
            b[T.Ramp(t + lanes * 2 + lanes // 4, 1, lanes // 2)] = T.Broadcast(c, lanes // 2)
    return kernel.with_attr("target", SM90)


def on_cpu(func: tirx.PrimFunc):
    """The kernel's loops serial, built for the CPU."""
    serial = tvm_ffi.structural_map(func.body, (tirx.For, lambda loop: tirx.For(
        loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body)))
    cpu = func.with_body(serial).with_attr("target", tvm.target.Target("llvm"))
    return tvm.compile(tvm.IRModule({"splats": cpu}), target="llvm")["splats"]


@pytest.mark.parametrize("dtype,value", [("int8", -128), ("int8", -1), ("int8", 127), ("int8", 0), ("uint8", 255),
                                         ("uint8", 128), ("uint8", 7), ("int16", -32768), ("int16", -2),
                                         ("uint16", 65535), ("uint16", 300)])
def test_narrow_broadcasts_keep_their_values(dtype, value):
    """8 and 16 bytes of one int8 or int16 value (an int8 max's accumulator starting at -128),
    constant or loaded, and 4 loaded bytes, as the reinterpret of 32-bit words of its copies: TVM
    printed make_int4 of 16 or 8 arguments, and failed on the 4 loaded bytes."""
    func = cuda_spelling.nvcc_spellings(splats(dtype, value))
    left = [node.ty.dtype for node in _broadcasts(func) if node.ty.dtype.bits < 32]
    assert all(d.bits == 16 and d.lanes == 2 for d in left), func   # (a short2 TVM prints)
    a = torch.tensor([value], dtype=getattr(torch, dtype))
    lanes = 128 // tvm.DataType(dtype).bits
    b = torch.zeros(lanes * 2 + lanes // 2 + lanes // 4, dtype=a.dtype)
    on_cpu(func)(tvm.runtime.from_dlpack(a), tvm.runtime.from_dlpack(b))
    torch.testing.assert_close(b, torch.full_like(b, value))
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        built = tvm.compile(tvm.IRModule({"splats": splats(dtype, value)}), target=SM90,
                            tir_pipeline=pipeline.TIR_PIPELINE)   # (its last pass: nvcc_spellings)
        source = pipeline.generated_source(built, SM90)
        assert "make_int4" in source or "make_uint4" in source, source
        with SM90:
            assert b".entry splats" in nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def _broadcasts(func):
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.Broadcast, found.append))
    return found
