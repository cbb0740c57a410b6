"""The benchmark corpus computes what torch computes (CPU, small sizes), and the runner's CPU mode runs
end to end (CI smoke test; the numbers are not asserted)."""
import os
import subprocess
import sys

import shutil
import warnings

import pytest
import torch
from tvm.script import relax as R
import tvm

import babytriton as bt
from babytriton.schedules import SerialKernelWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench  # noqa: E402
from corpus import BACKWARD, WORKLOADS, Workload, by_name  # noqa: E402
from babytriton.torch import autograd  # noqa: E402

# Workloads that do not compile or do not match torch on the CPU today: the explicit list of known
# failures. strict=True: a fix makes its test fail until the entry is removed here.
KNOWN_FAILURES: dict[str, str] = {}
# The same on a GPU (sm_90, small sizes).
KNOWN_GPU_FAILURES = {**KNOWN_FAILURES}
# Forward+backward workloads whose backward is not compiled today (it falls back to torch autograd over
# the eager reference); strict, as above.
KNOWN_BACKWARD_FAILURES: dict[str, str] = {}


def _params(known=KNOWN_FAILURES, *extra_marks):
    params = []
    for w in WORKLOADS:
        marks = [pytest.mark.xfail(strict=True, reason=known[w.name])] if w.name in known else []
        params.append(pytest.param(w, id=w.name, marks=[*marks, *extra_marks]))
    return params


def test_every_workload_has_every_size():
    for w in WORKLOADS:
        assert set(w.shapes) == {"small", "medium", "full"}, w.name
    chain = next(w for w in WORKLOADS if w.name == "elementwise").make("medium")
    assert chain[0].numel() == 1 << 22  # big enough that a fraction of a memory copy means something


def test_corpus_names_are_unique_and_known_failures_exist():
    names = [w.name for w in WORKLOADS]
    assert len(names) == len(set(names)) and len(names) >= 20
    assert set(KNOWN_GPU_FAILURES) <= set(names)
    assert set(KNOWN_BACKWARD_FAILURES) <= set(BACKWARD) <= set(names)


def _backward_params(*extra_marks):
    return [pytest.param(by_name(n), id=n, marks=[*([pytest.mark.xfail(strict=True, reason=KNOWN_BACKWARD_FAILURES[n])]
                                                    if n in KNOWN_BACKWARD_FAILURES else []), *extra_marks])
            for n in BACKWARD]


def _check_backward(workload, device, target):
    args = bench.with_grad(tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in workload.make("small")))
    g = bench.grad_of_output(workload, args)
    step, kernels = bench.compile_and_check_backward(workload, args, g, target)
    forward, backward = map(int, kernels.split("+"))
    assert forward >= 1 and backward >= 1
    step()   # the timed call runs again, and gives the same gradients
    got = [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    bench.fwd_bwd(workload.torch_fn, args, g)[0]()
    bench.check_close(tuple(got), tuple(a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad),
                      workload.tolerance())


@pytest.mark.parametrize("workload", _backward_params())
def test_backward_workload_matches_torch(workload):
    """Forward+backward of each BACKWARD workload: compiled (no fallback), the gradients torch's."""
    _check_backward(workload, "cpu", "cpu")


@pytest.mark.parametrize("workload", _backward_params(pytest.mark.gpu))
def test_backward_workload_matches_torch_on_the_gpu(workload):
    _check_backward(workload, "cuda", "gpu")


def backward_kernel(workload, target, size="full"):
    """The compiled backward of a workload at `size` (meta tensors: shapes only), every floating-point
    tensor differentiated."""
    args = workload.make(size, "meta")
    f = bt.jit(target=target)(workload.bt_fn)
    requires = tuple(isinstance(a, torch.Tensor) and a.is_floating_point() for a in args)
    out = workload.torch_fn(*args)
    specs = autograd.concrete(f.info.specs(args), args)
    return f.backward_kernel(specs, autograd.Variant(requires, (True,)), [out])


@pytest.mark.parametrize("target", ["cpu", {"kind": "cuda", "arch": "sm_90"}], ids=["cpu", "cuda"])
@pytest.mark.parametrize("workload", [by_name(n) for n in BACKWARD if n not in KNOWN_BACKWARD_FAILURES],
                         ids=lambda w: w.name)
def test_no_backward_kernel_runs_serially_at_full_size(workload, target):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialKernelWarning)
        assert len(backward_kernel(workload, target).fusion) >= 1


@pytest.mark.parametrize("workload", _params())
def test_workload_matches_torch(workload):
    args = workload.make("small")
    f, kernels, _ = bench.compile_and_check(workload, args, "cpu")
    assert kernels >= 1
    if workload.name.endswith("_sym"):  # one compiled version serves another row count
        fewer = tuple(a[:3] if a.ndim == 2 else a for a in args)
        bench.check_close(f(*fewer), workload.torch_fn(*fewer), workload.tolerance())
        assert f.cache_info()["compilations"] == 1, f.cache_info()


@pytest.mark.parametrize("workload", _params(KNOWN_GPU_FAILURES, pytest.mark.gpu))
def test_workload_matches_torch_on_the_gpu(workload):
    args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in workload.make("small"))
    _, kernels, _ = bench.compile_and_check(workload, args, "gpu")
    assert kernels >= 1


@pytest.mark.gpu
def test_attention_fp16_at_full_size_on_the_gpu():
    workload = next(w for w in WORKLOADS if w.name == "attention_fp16")
    bench.compile_and_check(workload, workload.make("full", "cuda"), "gpu")


@pytest.mark.gpu
def test_kernel_time_is_the_device_time_of_a_call():
    """The "kernel of copy" column's device time: a copy of 64 MB takes longer on the GPU than one of
    64 KB, and a babytriton call's kernels take less than the call does end to end."""
    big, small = bench.kernel_time(*bench.copy_call(1 << 26, "cuda")), bench.kernel_time(*bench.copy_call(1 << 16, "cuda"))
    assert big is not None and small is not None and big > 4 * small
    w = by_name("mean_4096")
    args = w.make("full", "cuda")
    f, _, _ = bench.compile_and_check(w, args, "gpu")
    assert 0 < bench.kernel_time(f, args) < bench.time_call(f, args, True, 0.05)


SM90 = {"kind": "cuda", "arch": "sm_90"}
_full_size_kernels: dict = {}


def full_size_kernel(workload: Workload, target) -> tuple:
    """The workload compiled at its benchmark size for `target` (meta tensors: shapes only), with the
    SerialKernelWarnings it raised; once per module, as the serial and the nvcc checks read the same
    CUDA kernel."""
    key = (workload.name, str(target))
    if key not in _full_size_kernels:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SerialKernelWarning)
            kernel = bt.jit(target=target)(workload.bt_fn).compile(*workload.make("full", "meta"))
        serial = [str(w.message) for w in caught if issubclass(w.category, SerialKernelWarning)]
        for w in caught:   # the others, shown as they would have been
            if not issubclass(w.category, SerialKernelWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        _full_size_kernels[key] = kernel, serial
    return _full_size_kernels[key]


@pytest.mark.parametrize("target", ["cpu", SM90], ids=["cpu", "cuda"])
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_no_kernel_runs_serially_at_full_size(workload, target):
    """Every kernel of every workload at its benchmark size spreads its work over threads or blocks
    (no SerialKernelWarning from the pipeline)."""
    _, serial = full_size_kernel(workload, target)
    assert not serial, serial


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.parametrize("workload", [w for w in WORKLOADS if w.dtype != torch.float32], ids=lambda w: w.name)
def test_half_workloads_cuda_compiles_with_nvcc(workload):
    """The CUDA of every half-precision workload at full size is valid C++ for nvcc (NVRTC refused eight
    halves computed as one float32 vector once: `make_ulonglong4` with eight arguments)."""
    from tvm.support import nvcc
    kernel, _ = full_size_kernel(workload, SM90)
    if not kernel.source:  # everything handed to torch (cuBLAS, SDPA): no CUDA of ours
        assert all(k.rule in ("torch.matmul", "SDPA") for k in kernel.fusion)
        return
    with tvm.target.Target(SM90):
        assert b".entry" in nvcc.compile_cuda(kernel.source, target_format="ptx", compiler="nvcc")


def _refused(x):
    return x.no_such_method()   # babytriton refuses it with a located CompilationError


def test_failure_reason_is_one_line():
    w = Workload("refused", _refused, lambda x: x, {"small": [(4,)]}, inputs=lambda shapes, dtype, device: (
        torch.ones(shapes[0], dtype=dtype, device=device),))
    with pytest.raises(Exception) as info:
        bench.compile_and_check(w, w.make("small"), "cpu")
    text = bench.reason(info.value)
    assert "\n" not in text and text.startswith("CompilationError: ")
    row = {"workload": w.name, "fails": text, "eager": 1e-5}
    assert f"| {w.name} |  | fails: CompilationError: " in bench.render([row])


def test_mismatch_is_reported_not_raised():
    with pytest.raises(AssertionError) as info:
        bench.check_close(torch.ones(3), torch.zeros(3), 1e-4)
    assert bench.reason(info.value).startswith("wrong result: Greatest absolute difference: 1.0")


def test_cpu_benchmark_runs(tmp_path):
    only = "elementwise,softmax_fp16,rmsnorm_sym,adamw,attention,causal_softmax_additive"
    table = tmp_path / "table.md"
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), "--cpu", "--sizes", "small",
                          "--no-compile", "--threads", "1", "--budget", "0.005", "--only", only,
                          "--markdown", str(table)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    text = table.read_text()
    assert "| case | kernels | babytriton | eager |" in text
    for name in only.split(","):
        assert f"| {name} |" in text, text
    assert "fails: " not in text
    assert "6 of 6 workloads ran" in text
    for case in ("call overhead (cpu, 2x3)", "cold compile (cpu)", "cold compile (cuda codegen)"):
        assert f"| {case} |" in text, text
    assert "forward+backward" not in text   # none of these is in corpus.BACKWARD


def test_cpu_backward_rows():
    """A forward+backward row times babytriton, eager and torch.compile; a fallback is a failing row."""
    row = bench.bench_backward(by_name("gelu_tanh"), "small", False, True, 0.002)
    assert "fails" not in row and row["kernels"] == "1+1", row
    assert row["babytriton"] > 0 and row["eager"] > 0 and row["torch.compile"] > 0
    text = bench.render([row])
    assert "| gelu_tanh | 1+1 | " in text

    def uses_cumprod(x):
        return R.cumprod(x, 0) * x   # cumprod has no registered gradient: the backward falls back
    w = Workload("cumprod", uses_cumprod, lambda x: torch.cumprod(x, 0) * x, {"small": [(8,)]},
                 inputs=lambda s, d, dev: (torch.randn(s[0], dtype=d, device=dev),))
    row = bench.bench_backward(w, "small", False, False, 0.002)
    assert row["fails"].startswith("backward not compiled: `cumprod`") and "test_benchmarks.py:" in row["fails"], row


# --------------------------------------------------------------------------------------------------
# the performance fuzzer (benchmarks/perf_fuzz.py, perf_programs.py, outside.py)
# --------------------------------------------------------------------------------------------------

def test_perf_programs_are_reproducible_and_cover_the_issue():
    """Generated programs are the same for the same seed, start from 2^16..2^26 elements, and between
    them have every dtype, transposed inputs both ways, reductions over every kind of axis set,
    several results, scans, split halves, group reshapes, quantised results and outer products."""
    import perf_programs as pp
    programs = [pp.generate(3, i) for i in range(300)]
    assert [p.module_text() for p in programs[:20]] == [pp.generate(3, i).module_text() for i in range(20)]
    assert all(1 << 16 <= p.size <= 1 << 26 for p in programs)
    tags = {t for p in programs for t in p.tags}
    wanted = {"float32", "float16", "bfloat16", "int8", "T-arg", "T-inside", "transpose", "halves", "grouped",
              "quantise", "outer", "multi-output", "reduce-inner", "reduce-middle", "reduce-outer", "reduce-all",
              "reduce-several", "softmax-inner", "norm-inner", "norm-outer", "scan-inner"}
    assert wanted <= tags, wanted - tags
    widths = {a.shape[-1] for p in programs for a in p.args if len(a.shape) > 1}
    assert any(w & (w - 1) for w in widths) and any(not w & (w - 1) for w in widths)  # powers of two and not


def test_generated_programs_run_in_torch(tmp_path):
    """The generator writes valid PyTorch: small programs run eagerly without an error or a NaN."""
    import perf_programs as pp
    from babytriton.testing.fuzz import load
    for i in range(60):
        program = pp.generate(0, i, pp.SMALL_LOG2)
        path = tmp_path / f"p{i}.py"
        path.write_text(program.module_text())
        out = load(path).f(*pp.make_args(program.args, "cpu", 1))
        for value in out if isinstance(out, tuple) else (out,):
            assert not value.is_floating_point() or not value.isnan().any(), program.module_text()


def test_perf_fuzz_comparison_rules():
    import perf_fuzz
    x = torch.randn(64, 64)
    assert perf_fuzz.differs(x.bfloat16(), (x * 1.01).bfloat16()) is None           # bfloat16 rounding
    assert "greatest difference" in perf_fuzz.differs(x, x + 0.1)
    assert perf_fuzz.differs(torch.tensor([3, -4], dtype=torch.int8), torch.tensor([4, -4], dtype=torch.int8)) is None
    assert perf_fuzz.differs(torch.tensor([1, -4], dtype=torch.int8), torch.tensor([4, -4], dtype=torch.int8))
    index = torch.arange(10000)
    assert perf_fuzz.differs(torch.where(index == 7, 0, index), index) is None     # a tie picked differently
    assert perf_fuzz.differs(index.flip(0), index)
    assert perf_fuzz.differs(x.half(), x)                                           # dtype


def test_perf_fuzz_runs_generated_and_outside_programs(tmp_path):
    """The runner end to end on the CPU (no workers, no torch.compile): ratios, kernel strategies,
    the VM's ops (cumsum) and programs that update their arguments (SGD)."""
    import perf_fuzz
    common = ["--device", "cpu", "--small", "--no-compile", "--jobs", "0", "--threads", "1", "--budget", "0.002",
              "--repeats", "1", "--below", "1e9", "--workdir", str(tmp_path), "--markdown", str(tmp_path / "out.md")]
    generated = perf_fuzz.main(common + ["--n", "3"])
    other = perf_fuzz.main(common + ["--set", "outside", "--only", "group_norm,cumsum,sgd_momentum"])
    for text, names in ((generated, ["p0", "p1", "p2"]), (other, ["group_norm", "cumsum", "sgd_momentum"])):
        assert "| eager / babytriton | programs | p10 | p25 | median |" in text
        assert "| all | 3 |" in text and "babytriton build failures 0; mismatches 0" in text, text
        for name in names:  # every program listed (--below 1e9) with its kernels' strategies
            assert f"| {name} (" in text, text
    assert "CPUReduction" in other and "no kernel (VM op cumsum)" in other
    assert (tmp_path / "out.md").read_text().count("### Performance fuzzer") == 2
