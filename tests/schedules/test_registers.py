"""Every GPU thread's register arrays small (babytriton/schedules/registers.py): a buffer in scope
"local" that TVM's compaction cannot shrink to one thread's share is flattened, and a kernel whose
arrays are still too large is declined by its rule (the next rule takes it) or, on the last rule,
is a CompilationError naming the kernel. Here: the perf fuzzer's p76 (a softmax over axis 0 of a
chunk's halves: 3,465,216 floats a thread, a failed launch on an H200) and generated column
reductions built for sm_90 (ptxas: small stack frames), the same programs against torch on the CPU,
and a rule that keeps a whole buffer a thread, declined."""
import os
import re
import shutil
import subprocess

import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import s_tir
from tvm.s_tir import dlight as dl
from tvm.script import tirx as T

import babytriton as bt
from babytriton import schedules
from babytriton.core.errors import CompilationError
from babytriton.schedules import registers

SM90 = {"kind": "cuda", "arch": "sm_90"}
NVCC = shutil.which("nvcc")


def p76(x, w):
    a, g = torch.chunk(x, 2, dim=3)
    h = F.silu(a) * g
    m = h.max(dim=0, keepdim=True).values
    e = torch.exp(h - m)
    h = e / e.sum(0, keepdim=True)
    h = F.normalize(h, dim=2)
    h = h * w
    return h


def column_sums(x):
    return x.sum(0, keepdim=True), x.amax(1)


def local_arrays(source: str) -> list[int]:
    """The element counts of the CUDA source's per-thread arrays."""
    return [int(n) for n in re.findall(r"\b\w+_local\w*\[(\d+)\];", source)]


def ptxas_frames(source: str) -> list[int]:
    out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-x", "cu", "-", "-o", os.devnull],
                         input=source, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return [int(n) for n in re.findall(r"(\d+) bytes stack frame", out.stderr)]


def compile_sm90(fn, *shapes):
    return bt.jit(target=SM90, cache=False)(fn).compile(*(torch.empty(s, device="meta") for s in shapes))


def test_p76_keeps_four_floats_a_thread():
    """Its three column reductions over (2, 12, 2048) kept columns stay OuterReduction's, each thread
    keeping its vector of four results (not the 3,465,216 floats TVM sized before)."""
    k = compile_sm90(p76, (9, 2, 12, 4096), (2048,))
    assert [kern.rule for kern in k.fusion].count("OuterReduction") == 3, k.fusion
    assert local_arrays(k.source) and max(local_arrays(k.source)) <= 4, local_arrays(k.source)
    if NVCC:
        assert max(ptxas_frames(k.source)) <= 64


def test_p76_matches_torch_on_the_cpu():
    x, w = torch.randn(9, 2, 12, 256), torch.randn(128)
    x[0, 0, 0, :3] = float("nan")
    torch.testing.assert_close(bt.jit(p76, target="cpu")(x, w), p76(x, w), rtol=1e-4, atol=1e-5, equal_nan=True)


@settings(max_examples=6, deadline=None)
@given(st.integers(9, 31), st.sampled_from([2, 3, 24]), st.sampled_from([2048, 4096, 8192]))
def test_short_column_reductions_over_several_kept_axes(rows, middle, width):
    """Short reductions (one thread along them, 9 rows or more: fewer are SmallReduction's) over
    several kept axes, rows wider than a block's 1024 columns (each thread's four then compacted to
    thousands): every thread's arrays a vector, for sm_90; and the CPU's results torch's."""
    k = compile_sm90(column_sums, (rows, middle, width))
    assert k.fusion[0].rule == "OuterReduction", k.fusion
    assert max(local_arrays(k.source), default=0) <= 4, local_arrays(k.source)
    x = torch.randn(rows, middle, 64)
    got, want = bt.jit(column_sums, target="cpu")(x), column_sums(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@T.prim_func(private=True, s_tir=True)
def doubled(x: T.Buffer((64, 8192), "float32"), y: T.Buffer((64, 8192), "float32")):
    for i, j in T.grid(64, 8192):
        with T.sblock("double"):
            vi, vj = T.axis.remap("SS", [i, j])
            y[vi, vj] = x[vi, vj] * T.float32(2)


class WholeRowEachThread(dl.ScheduleRule):
    """A rule with a bug: a block's threads compute its row into a register copy placed at the block,
    not at the thread, so every thread keeps the whole row (no compaction can shrink it)."""

    def apply(self, func, target, _tunable):
        sch = s_tir.Schedule(func)
        block = sch.get_sblock("double")
        copy = sch.cache_write(block, 0, "local")
        i, j = sch.get_loops(block)
        sch.bind(i, "blockIdx.x")
        sch.bind(j, "threadIdx.x")
        sch.reverse_compute_at(copy, i)
        return sch


def test_a_rule_keeping_a_large_register_array_is_declined():
    """The next rule takes the kernel, and k.fusion's reason names the array."""
    mod = tvm.IRModule({"doubled": doubled})
    with tvm.target.Target(SM90), schedules.Declines(mod) as declined:
        out = dl.ApplyDefaultSchedule(schedules.Guarded(WholeRowEachThread()),
                                      schedules.Guarded(schedules.BoundedFallback(), guard=False))(mod)
    out = declined.onto(out)
    func = out["doubled"]
    assert str(func.attrs[schedules.RULE_ATTR]) == "dlight.gpu.Fallback"
    assert "register array `y_local` of 32,768 bytes" in str(func.attrs[schedules.DECLINED_ATTR])
    assert not registers.register_arrays(func) or max(registers.register_arrays(func).values()) <= 64


def test_the_last_rule_keeping_a_large_register_array_fails():
    mod = tvm.IRModule({"doubled": doubled})
    with tvm.target.Target(SM90), pytest.raises(Exception, match="register array `y_local`"):
        # (TooManyRegisters, re-raised as a RuntimeError as it crosses Dlight's C++ loop)
        dl.ApplyDefaultSchedule(schedules.Guarded(WholeRowEachThread(), guard=False))(mod)


def test_flattening_keeps_what_compacts_already():
    """A schedule whose arrays are small is returned as it is (no copy, no layout changed)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": doubled}))
    assert registers.small_registers(sch) is sch


def test_the_user_sees_a_compilation_error_naming_the_kernel(monkeypatch):
    """Where no rule is left to take the kernel: at the user's line, naming the kernel."""
    monkeypatch.setattr(registers, "REGISTER_BYTES", 0)  # any register array is too large
    monkeypatch.setattr(registers, "LOCAL_LIMIT", 0)
    monkeypatch.setattr(schedules, "gpu_rules", lambda _: [schedules.Guarded(schedules.OuterReduction(), guard=False)])
    with pytest.raises(CompilationError) as error:
        compile_sm90(column_sums, (9, 24, 2048))
    assert "kernel `" in str(error.value) and "x.sum(0, keepdim=True)" in str(error.value), error.value
