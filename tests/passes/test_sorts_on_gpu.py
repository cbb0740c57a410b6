"""Sorts on a GPU go to torch's stable sort (offload._SortsToTorch): sort, argsort and topk become packed
calls of torch.sort/torch.argsort (a topk: the first k indices, values gathered at them).

The rewrite's meaning is checked on the CPU (a Relax module rewritten, built for LLVM, its packed
calls running torch on CPU tensors); GPU builds are checked for sm_90 with nvcc; on a GPU,
benchmarks/probes/topk.py's programs (sorts of values the function computes, issue 27's topk_router_sigmoid
among them) are compared with torch.
"""
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import babytriton as bt
from babytriton.passes import offload

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "probes"))
sys.path.insert(0, str(ROOT / "tests"))
import topk as probe  # noqa: E402
from torch_corpus import CORPUS  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}


def _module(dtype: str, shape: tuple, build):
    """A Relax function of one tensor whose body is `build(x)` (a Relax expression), rewritten."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(x))
        bb.emit_func_output(out)
    return offload.offload_sorts(bb.get())


def _run_on_cpu(mod, x: torch.Tensor):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))
    items = list(out) if isinstance(out, (tvm.ir.Array, list, tuple)) else [out]
    return [torch.from_numpy(item.numpy()) for item in items]


def _first(t, k, dim, descending):
    """torch's stable sort's first k along `dim`: (values, indices), ties in index order."""
    result = torch.sort(t, dim=dim, descending=descending, stable=True)
    return result.values.narrow(dim, 0, k), result.indices.narrow(dim, 0, k)


# (Relax op, torch's answer): a topk is the stable sort's first k (torch's own topk orders ties as it
# likes); the inputs below have ties in every row, and a NaN
REWRITES = {
    "topk both, largest, last axis": (lambda x: relax.op.topk(x, 3, axis=-1, ret_type="both", largest=True, dtype="int32"),
                                      lambda t: _first(t, 3, -1, True)),
    "topk values, smallest, axis 0": (lambda x: relax.op.topk(x, 2, axis=0, ret_type="values", largest=False),
                                      lambda t: _first(t, 2, 0, False)[:1]),
    "topk indices, k < 1 takes all": (lambda x: relax.op.topk(x, 0, axis=1, ret_type="indices", dtype="int64"),
                                      lambda t: _first(t, t.shape[1], 1, True)[1:]),
    "argsort descending, int32": (lambda x: relax.op.argsort(x, axis=1, descending=True, dtype="int32"),
                                  lambda t: (torch.argsort(t, dim=1, descending=True, stable=True),)),
    "sort ascending, axis 0": (lambda x: relax.op.sort(x, axis=0, descending=False),
                               lambda t: (torch.sort(t, dim=0, stable=True).values,)),
    # scans (offload._scan, where scans.py declines): TVM's GPU scan was wrong over middle and outer axes
    "cumsum, axis 0": (lambda x: relax.op.cumsum(x, axis=0), lambda t: (torch.cumsum(t, 0),)),
    "cumsum exclusive, axis 1": (lambda x: relax.op.cumsum(x, axis=1, exclusive=True),
                                 lambda t: (torch.cat([torch.zeros_like(t[:, :1]), torch.cumsum(t, 1)[:, :-1]], 1),)),
    "cumsum of the flattened tensor": (lambda x: relax.op.cumsum(x), lambda t: (torch.cumsum(t.reshape(-1), 0),)),
    "cumprod exclusive, axis 0": (lambda x: relax.op.cumprod(x, axis=0, exclusive=True),
                                  lambda t: (torch.cat([torch.ones_like(t[:1]), torch.cumprod(t, 0)[:-1]]),)),
}


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("name", list(REWRITES))
def test_rewritten_sorts_mean_what_torch_means(name, dtype, monkeypatch):
    build, reference = REWRITES[name]
    # scans: torch's, where our GPU kernels (scans.py, tests/operators/test_scans.py) decline; those cannot run here
    monkeypatch.setattr(offload.scans, "plan", lambda *args, **kwargs: None)
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-4, 5, (6, 7), generator=g).to(getattr(torch, dtype))
    if dtype == "float32":
        x[2, 3] = float("nan")
    mod = _module(dtype, tuple(x.shape), build)
    assert not any(op in mod.script() for op in ("relax.topk", "R.argsort", "R.sort", "R.cumsum", "R.cumprod"))
    got, want = _run_on_cpu(mod, x), reference(x)
    assert len(got) == len(want)
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_.numpy(), w.to(g_.dtype).numpy())


def test_router_on_sm90_sorts_with_torch_and_builds():
    case = next(c for c in CORPUS if c.name == "topk_router_sigmoid")
    k = bt.jit(case.fn, target=SM90).compile(*case.make_inputs("cpu"))
    rules = [kernel.rule for kernel in k.fusion]
    assert rules.count("torch.argsort") == 2, k.fusion
    assert "argsort" not in k.source  # no TVM sort kernel left
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")


def test_cpu_builds_keep_tvms_sort():
    case = next(c for c in CORPUS if c.name == "topk_router_sigmoid")
    k = bt.jit(case.fn).compile(*case.make_inputs("cpu"))
    assert "SortsToTorch" not in k.stages and "torch.argsort" not in {kernel.rule for kernel in k.fusion}


@pytest.mark.gpu
@pytest.mark.parametrize("case", probe.CASES, ids=[c.name for c in probe.CASES])
def test_gpu_sorts_of_computed_values_match_torch(case):
    assert probe.run_case(case) is None, probe.run_case(case)


SCAN_SHAPES = [(12, 16, 9158), (299, 4, 96), (503, 2048), (0, 5), (7, 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SCAN_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gpu_scans_over_every_axis_match_torch(shape, dtype):
    """The shapes and axes of the performance fuzzer's wrong GPU scans (p12, p88, p89), and empty. A half
    scan accumulates in float32 and rounds once (README, semantics; torch's CPU scan does the same), so
    its reference is torch's scan of float32 copies: torch's CUDA kernel rounds to float16 at every step,
    which over 9158 elements strays by tens of float16 steps from either."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to("cuda", dtype)
    for axis in range(x.dim()):
        def scans(t, axis=axis):
            return torch.cumsum(t * 2, dim=axis), torch.cumprod(1 + t / 64, dim=axis)
        got = bt.jit(scans, target="gpu")(x)
        want = torch.cumsum((x * 2).float(), dim=axis), torch.cumprod((1 + x / 64).float(), dim=axis)
        for g_, w in zip(got, want):
            assert g_.dtype == dtype
            torch.testing.assert_close(g_, w.to(dtype), rtol=1e-3 if dtype == torch.float16 else 1e-4, atol=1e-3)
