"""GPU check of sorts of computed values (issue 27: `topk_router_sigmoid` gave wrong values and indices
on the H200, the topk of a parameter did not).

Run on the GPU machine, from the project root (after `source .gpu/setup.sh`):

    python benchmarks/probes/topk.py            # about 30-60 s: PASS/FAIL per case, then the diagnosis

Part 1 runs programs that sort values the function computes (topk, sort, argsort; several shapes,
k, dtypes, largest/smallest, dims, NaN) on CUDA, as babytriton now builds them (sorts through torch's
stable sort, offload._SortsToTorch), and compares each with torch. Part 2 builds the router case the
way it was built before (TVM's GPU sort, the offload switched off) and takes it apart: TVM alone
(no babytriton), the VM's memory plan off, the computed scores returned too, and a run under
CUDA_LAUNCH_BLOCKING=1. The last line says which route is right. tests/passes/test_sorts_on_gpu.py runs
part 1 under pytest (`-m gpu`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import babytriton as bt
from babytriton.passes import offload

DEVICE = "cuda"


# ------------------------------------------------------------------------------------------------
# the programs: each sorts something it computes
# ------------------------------------------------------------------------------------------------

def router(logits, k: int):
    """DeepSeek-V3's router, as in tests/torch_corpus.py (topk_router_sigmoid)."""
    scores = logits.sigmoid()
    _, idx = scores.topk(k, dim=-1, sorted=True)
    weights = scores.gather(1, idx)
    return weights / weights.sum(-1, keepdim=True), idx


def topk_of_affine(x, k: int, largest: bool):
    return (x * 2.0 + 1.0).topk(k, dim=-1, largest=largest)


def topk_along_dim0(x, k: int):
    return torch.topk(x * -2.0, k, dim=0)


def softmax_topk(x, k: int):
    probs = F.softmax(x, dim=-1, dtype=torch.float)
    values, idx = torch.topk(probs, k, dim=-1)
    return values / values.sum(dim=-1, keepdim=True), idx


def sort_of_computed(x, descending: bool):
    return torch.sort(x * 2.0 - 1.0, dim=-1, descending=descending, stable=True)


def argsort_of_computed(x):
    return torch.argsort(x + 0.5, dim=0, stable=True)


def topk_of_parameter(x, k: int):
    return x.topk(k, dim=-1)


def AFFINE(x):  # noqa: N802 - a constant of the table below
    return x * 2.0 + 1.0


@dataclass
class Case:
    name: str
    fn: object
    shape: tuple
    dtype: torch.dtype = torch.float32
    extra: tuple = ()
    nan: bool = False
    source: object = None   # what the program sorts, computed by torch from the input (for "topk")
    # how results are compared (each program computes what it sorts with one rounding, so its values
    # are torch's bit for bit): "exact" (stable sorts: indices too), "topk" (ties may order
    # either way in torch's topk: values exact, each index pointing at its value, indices distinct),
    # "router" (the top-k of torch's scores by value, within float tolerance)
    check: str = "exact"


CASES = [
    Case("router 16x8 k=2", router, (16, 8), extra=(2,), check="router"),
    Case("router 64x64 k=4", router, (64, 64), extra=(4,), check="router"),
    Case("router 33x257 k=8 (rows past 128)", router, (33, 257), extra=(8,), check="router"),
    Case("topk(2x+1) 16x8 k=2 largest", topk_of_affine, (16, 8), extra=(2, True), check="topk", source=AFFINE),
    Case("topk(2x+1) 40x300 k=5 smallest NaN", topk_of_affine, (40, 300), extra=(5, False), nan=True, check="topk",
         source=AFFINE),
    Case("topk(2x+1) 8x1000 k=16 float16", topk_of_affine, (8, 1000), torch.float16, (16, True), check="topk",
         source=AFFINE),
    Case("topk(2x+1) 8x130 k=3 bfloat16 NaN", topk_of_affine, (8, 130), torch.bfloat16, (3, True), nan=True,
         check="topk", source=AFFINE),
    Case("topk(-2x) dim=0 50x6 k=4", topk_along_dim0, (50, 6), extra=(4,), check="topk", source=lambda x: x * -2.0),
    Case("softmax then topk 32x8 k=2", softmax_topk, (32, 8), extra=(2,), check="router"),
    Case("sort(2x-1) 16x8 descending", sort_of_computed, (16, 8), extra=(True,)),
    Case("sort(2x-1) 5x700 ascending NaN", sort_of_computed, (5, 700), extra=(False,), nan=True),
    Case("sort(2x-1) 4x200 float16", sort_of_computed, (4, 200), torch.float16, (True,)),
    Case("argsort(x+0.5) dim=0 129x3", argsort_of_computed, (129, 3)),
    Case("topk of a parameter 16x8 k=2", topk_of_parameter, (16, 8), extra=(2,), check="topk", source=lambda x: x),
]


def inputs(case: Case, device: str = DEVICE):
    g = torch.Generator().manual_seed(len(case.name))
    x = torch.randn(*case.shape, generator=g)
    if case.nan:
        x.view(-1)[:: 7] = float("nan")
    return (x.to(case.dtype).to(device), *case.extra)


# ------------------------------------------------------------------------------------------------
# comparing with torch
# ------------------------------------------------------------------------------------------------

def _same_values(got, want) -> str | None:
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    if got.is_floating_point():
        bad = ~((got == want) | (got.isnan() & want.isnan()))
    else:
        bad = got != want
    return f"{int(bad.sum())} of {bad.numel()} differ" if bad.any() else None


def compare(case: Case, got, want, x) -> str | None:
    """None when `got` is right, else what is wrong."""
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        return f"{len(got)} results, torch gives {len(want)}"
    if case.check == "exact":
        for i, (g, w) in enumerate(zip(got, want)):
            why = _same_values(g, w)
            if why:
                return f"result {i}: {why}"
        return None
    if case.check == "topk":
        (values, idx), (want_values, _) = got, want
        why = _same_values(values, want_values)
        if why:
            return f"values: {why}"
        dim = 0 if case.fn is topk_along_dim0 else -1
        if idx.dtype != torch.int64:
            return f"indices are {idx.dtype}"
        why = _same_values(case.source(x).gather(dim, idx), values)
        if why:
            return f"the values at the indices: {why}"
        if idx.sort(dim=dim).values.diff(dim=dim).eq(0).any():
            return "an index repeats"
        return None
    # router: the indices must pick the k largest of torch's own scores (near-ties either way)
    (weights, idx), (want_weights, want_idx) = got, want
    if idx.dtype != torch.int64 or idx.shape != want_idx.shape:
        return f"indices {idx.dtype}{tuple(idx.shape)}"
    scores = torch.softmax(x.float(), dim=-1) if case.fn is softmax_topk else x.sigmoid()
    picked, best = scores.gather(1, idx), scores.topk(idx.shape[-1], dim=-1).values
    if not torch.allclose(picked, best, rtol=1e-5, atol=1e-6):
        rows = int((~torch.isclose(picked, best, rtol=1e-5, atol=1e-6)).any(-1).sum())
        return f"indices do not pick the top {idx.shape[-1]} in {rows} of {idx.shape[0]} rows"
    if not torch.allclose(weights, want_weights, rtol=1e-4, atol=1e-5):
        return f"weights differ by up to {float((weights - want_weights).abs().max()):.3g}"
    return None


def run_case(case: Case, jitted=None) -> str | None:
    """None when babytriton's CUDA result is torch's, else the reason (a failure to build or run too)."""
    args = inputs(case)
    want = case.fn(*args)
    try:
        got = (jitted or bt.jit(case.fn, target="gpu"))(*args)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - reported as the case's failure
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return compare(case, got, want, args[0])


# ------------------------------------------------------------------------------------------------
# part 2: the router through TVM's GPU sort, taken apart
# ------------------------------------------------------------------------------------------------

class tvm_sorts:  # noqa: N801 - used as `with tvm_sorts():`
    """Builds inside use TVM's GPU sort again (the rewrite to torch's sort switched off)."""

    def __enter__(self):
        self.saved = offload.offload_sorts
        offload.offload_sorts = lambda mod: mod

    def __exit__(self, *exc):
        offload.offload_sorts = self.saved


def router_with_scores(logits, k: int):
    scores = logits.sigmoid()
    _, idx = scores.topk(k, dim=-1, sorted=True)
    weights = scores.gather(1, idx)
    return weights / weights.sum(-1, keepdim=True), idx, scores


def tvm_alone_module(shape=(16, 8), k: int = 2):
    """The router's sort in TVM alone (no babytriton): sigmoid, argsort, the first k, values gathered;
    tvm.compile's own CUDA pipeline (DispatchSortScan, LegalizeOps, Dlight) builds it."""
    from tvm import relax
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            scores = bb.emit(relax.op.sigmoid(x))
            order = bb.emit(relax.op.argsort(scores, axis=1, descending=True, dtype="int32"))
            first = bb.emit(relax.op.strided_slice(order, [1], [0], [k]))
            values = bb.emit(relax.op.gather_elements(scores, first, axis=1))
            out = bb.emit_output(relax.Tuple([values, first, scores]))
        bb.emit_func_output(out)
    return bb.get()


def tvm_alone(shape=(16, 8), k: int = 2) -> str:
    import tvm
    from tvm import relax
    target = tvm.target.Target.from_device(tvm.cuda())
    vm = relax.VirtualMachine(tvm.compile(tvm_alone_module(shape, k), target=target), tvm.cuda())
    logits = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).cuda()
    values, first, scores = (torch.from_dlpack(t) for t in vm["main"](tvm.runtime.from_dlpack(logits)))
    torch.cuda.synchronize()
    want = logits.sigmoid().topk(k, dim=-1)
    bad = []
    if not torch.allclose(scores, logits.sigmoid(), rtol=1e-5, atol=1e-6):
        bad.append("scores")
    if not torch.equal(first.long(), want.indices):
        bad.append(f"indices ({int((first.long() != want.indices).sum())} of {first.numel()})")
    if not torch.allclose(values, want.values, rtol=1e-5, atol=1e-6):
        bad.append("values")
    return "PASS" if not bad else "FAIL: " + ", ".join(bad)


def diagnose() -> dict[str, str]:
    """The router through TVM's sort, several ways: which layer gets it wrong."""
    import tvm
    case = next(c for c in CASES if c.name == "router 16x8 k=2")
    found = {}
    try:
        found["TVM alone (relax argsort, no babytriton)"] = tvm_alone()
    except Exception as e:  # noqa: BLE001
        found["TVM alone (relax argsort, no babytriton)"] = f"ERROR {type(e).__name__}: {str(e)[:160]}"
    with tvm_sorts():
        found["babytriton, TVM's sort"] = verdict(run_case(case))
        with tvm.transform.PassContext(disabled_pass=["StaticPlanBlockMemory"]):
            found["babytriton, TVM's sort, no memory plan"] = verdict(run_case(case, bt.jit(router, target="gpu")))
        args = inputs(case)
        got = bt.jit(router_with_scores, target="gpu")(*args)
        torch.cuda.synchronize()
        scores_ok = torch.allclose(got[2], args[0].sigmoid(), rtol=1e-5, atol=1e-6)
        found["babytriton, TVM's sort, scores returned too"] = (
            verdict(compare(case, got[:2], router(*args), args[0])) + f"; scores {'intact' if scores_ok else 'WRONG'}")
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    code = ("import sys; sys.path.insert(0, \"benchmarks/probes\"); import topk as p\nwith p.tvm_sorts():\n"
            "    print(p.verdict(p.run_case(next(c for c in p.CASES if c.name == 'router 16x8 k=2'))))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    lines = done.stdout.strip().splitlines()
    found["babytriton, TVM's sort, CUDA_LAUNCH_BLOCKING=1"] = \
        lines[-1] if lines else f"ERROR {done.stderr.strip()[-200:]}"
    return found


def verdict(why: str | None) -> str:
    return "PASS" if why is None else f"FAIL: {why}"


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: run this on the GPU machine")
        return 2
    os.environ["BABYTRITON_CACHE"] = "0"   # both routes compile the same programs: neither from the disk
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    start, failed = time.time(), 0
    for case in CASES:
        why = run_case(case)
        failed += why is not None
        print(f"{verdict(why)[:4]}  {case.name}" + (f"  -- {why}" if why else ""), flush=True)
    print(f"part 1: {len(CASES) - failed} of {len(CASES)} pass ({time.time() - start:.0f} s)\n")
    found = diagnose()
    for what, result in found.items():
        print(f"{what:50s} {result}")
    tvm_route = found["babytriton, TVM's sort"]
    print(f"\nSUMMARY: torch's sort route {'PASSES' if not failed else 'FAILS'} ({failed} failing); "
          f"TVM's sort route {'passes' if tvm_route == 'PASS' else 'fails'}; {time.time() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
