"""Differential fuzzing: every reproducer the fuzzer found stays fixed, a fixed-seed batch of random
programs compiles to what their eager runs compute, and the generator and minimiser do their jobs."""
import math
import os
import signal
from pathlib import Path

import pytest
import torch

from babytriton.eager import reference as eager
from babytriton.testing import fuzz

REGRESSIONS = sorted((Path(__file__).parent / "fuzz_regressions").glob("*.py"))
CI_PROGRAMS = 100   # about 27 s on one core: the long runs are scripts/fuzz.py's
NARROW_PROGRAMS = 40   # for the second CPU target: a quarter of the batch, about 15 s on one core
THREADED_PROGRAMS = 12
CUDA_PROGRAMS = 4      # each also built for sm_90 and compiled by nvcc: about 3 s a program


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_fuzz_regression(path):
    outcome = fuzz.check_file(path)
    assert outcome.kind == "ok", outcome.detail


def _unexplained(report) -> list:
    problems = []
    for seed, outcome, path in report.failures:
        text = path.read_text() if path else fuzz.generate(seed).module_text()
        problems.append(f"seed {seed}: {outcome.kind}: {outcome.detail}\n{text}")
    return problems


def test_fixed_seed_programs_match_torch(tmp_path, cpu_target, request):
    """A fixed-seed batch (NaN/inf, empty dims, views, long half-precision reductions, scalars of
    every kind among them), each program compared with plain torch and with its eager run; built for
    the host, and the batch's first NARROW_PROGRAMS for the narrower vector width of `cpu_targets`."""
    n = CI_PROGRAMS if request.node.callspec.params["cpu_target"] == "host" else NARROW_PROGRAMS
    report = fuzz.run(n, seed=0, out=tmp_path, minimise_failures=False)
    assert report.programs == n
    assert report.invalid == [], [(s, o.detail) for s, o in report.invalid]
    problems = _unexplained(report)
    assert not problems, "\n\n".join(problems)


def test_fixed_seed_programs_build_for_cuda(tmp_path):
    """A few programs (splits, torch's math, broadcasts among them) also built for sm_90, their CUDA
    compiled by nvcc where it is installed: none fails to build (the long runs: scripts/fuzz.py --cuda)."""
    report = fuzz.run(CUDA_PROGRAMS, seed=2, out=tmp_path, minimise_failures=False, cuda=True)
    assert report.programs == CUDA_PROGRAMS and report.invalid == []
    problems = _unexplained(report)
    assert not problems, "\n\n".join(problems)


def test_fixed_seed_programs_from_eight_threads(tmp_path):
    report = fuzz.run(THREADED_PROGRAMS, seed=1, out=tmp_path, minimise_failures=False, threads=8)
    assert report.programs == THREADED_PROGRAMS and report.invalid == []
    problems = _unexplained(report)
    assert not problems, "\n\n".join(problems)


def test_programs_are_reproducible_and_varied():
    assert fuzz.generate(7).module_text() == fuzz.generate(7).module_text()
    texts = [fuzz.generate(fuzz.program_seed(0, i)).source for i in range(60)]
    assert len(set(texts)) == 60
    joined = "\n".join(texts)
    for feature in ("bt.Tensor((", "'d", ": bt.constexpr", " if ", "sum(", "astype(", "@", " // ", "where(",
                    " and ", "+=", "def mul_add", "softmax("):
        assert feature in joined, feature


def test_a_wrong_eager_op_is_caught_and_minimised(tmp_path, monkeypatch):
    """Break one eager table entry: the fuzzer reports the programs that use it, cut down."""
    monkeypatch.setitem(eager.TORCH, "sigmoid", lambda x: torch.sigmoid(x) + 1)
    text = ("# a hand-written program\nimport torch\nimport babytriton as bt\n\n\n@bt.jit(cache=False)\n"
            "def f(x0, x1):\n    v0 = x0 * 2\n    v1 = sigmoid(v0) - x1\n    v2 = v0 + 1\n    return v1, v2\n\n\n"
            "ARGS = [('tensor', (2, 3), 'float32'), ('tensor', (3,), 'float32')]\nSEED = 1\nTOLERANCES = None\n")
    path = tmp_path / "program.py"
    path.write_text(text)
    outcome = fuzz.check_file(path)
    assert outcome.kind == "mismatch" and "result 0" in outcome.detail
    small, small_outcome = fuzz.minimise(text, outcome, tmp_path)
    assert small_outcome.kind == "mismatch"
    body = small.split("def f(")[1].split("ARGS")[0]
    assert "sigmoid(" in body and "v2" not in body and "x1" not in body, small


def test_compare_reports_dtype_shape_and_values():
    a = torch.tensor([1.0, 2.0])
    assert fuzz.compare(a, a.clone(), [(0.0, 0.0)]) is None
    assert "dtype" in fuzz.compare(a, a.double(), None)
    assert "shape" in fuzz.compare(a, a[:1], None)
    assert "values differ" in fuzz.compare(a, a + 1e-3, [(0.0, 0.0)])
    assert fuzz.compare(a, a + 1e-3, [(1e-2, 0.0)]) is None
    assert "structure" in fuzz.compare((a,), a, None)


def _module(tmp_path, body: str, args: str, name="program"):
    path = tmp_path / f"{name}.py"
    path.write_text(f"import torch\nimport babytriton as bt\n\n\n@bt.jit(cache=False)\n{body}\n\n"
                    f"ARGS = {args}\nSEED = 3\nTOLERANCES = None\n")
    return fuzz.load(path), path.read_text()


class _Wrapped:
    """A compiled function with something changed about its results (as a compiler bug would)."""
    def __init__(self, f, change):
        self.f, self.change, self.eager = f, change, f.eager

    def __call__(self, *args):
        return self.change(self.f(*args))


def test_the_torch_oracle_catches_wrong_values_dtypes_and_missing_errors(tmp_path):
    module, text = _module(tmp_path, "def f(x, s: float):\n    return abs(x) * s",
                           "[('tensor', (3, 4), 'float32'), ('scalar', 'float', 1.5)]")
    assert fuzz.check_module(module, text).kind == "ok"
    for change, expected in ((lambda r: r.double(), "dtype"), (lambda r: r + 1, "values differ"),
                             (lambda r: r[:1], "shape")):
        module.f = _Wrapped(fuzz.load(tmp_path / "program.py").f, change)
        outcome = fuzz.check_module(module, text)
        assert outcome.kind == "torch-mismatch" and expected in outcome.detail, outcome
    # NaN must come back where torch has it
    module, text = _module(tmp_path, "def f(x):\n    return maximum(x, 0.0)", "[('tensor', (64,), 'float32', "
                           "{'special': 0.3})]", "nan")
    module.f = _Wrapped(module.f, lambda r: r.nan_to_num(0.0))
    outcome = fuzz.check_module(module, text)
    assert outcome.kind == "torch-mismatch" and "nan" in outcome.detail
    # torch raises on the max of an empty tensor: returning a value is a finding, a clean error is not
    module, text = _module(tmp_path, "def f(x):\n    return x.max()", "[('tensor', (0, 3), 'float32')]", "empty")
    module.f = lambda x: torch.zeros(())
    assert fuzz.check_module(module, text).kind == "should-raise"
    module.f = lambda x: (_ for _ in ()).throw(ValueError("f(): max() of an empty tensor"))
    assert fuzz.check_module(module, text).kind == "ok"


def test_the_threaded_check_catches_calls_that_fail_together():
    import threading
    import time
    busy = threading.Lock()

    def not_reentrant(x):
        if not busy.acquire(blocking=False):
            raise RuntimeError("called while running")
        time.sleep(0.001)
        busy.release()
        return x + 1
    fresh = lambda: [torch.ones(3)]  # noqa: E731
    outcome = fuzz.check_threads(not_reentrant, fresh, torch.full((3,), 2.0), None, threads=8, calls=5)
    assert outcome.kind == "thread-crash" and "called while running" in outcome.detail
    assert fuzz.check_threads(lambda x: x + 1, fresh, torch.full((3,), 2.0), None, threads=8).kind == "ok"


def test_inputs_hold_special_values_empty_axes_views_and_the_negative_bit():
    x, y, z, w, s = fuzz.make_args([("tensor", (64, 3), "float32", {"special": 0.3}),
                                    ("tensor", (5, 4), "float16", {"view": "T"}),
                                    ("tensor", (4, 6), "float32", {"view": "step", "positive": True}),
                                    ("tensor", (2, 0), "bfloat16", {"view": "neg"}), ("scalar", "float", "nan")], 1)
    assert x.isnan().any() and x.isinf().any() and ((x == 0) & x.signbit()).any()
    assert y.shape == (5, 4) and not y.is_contiguous()
    assert z.shape == (4, 6) and z.stride() == (12, 2) and (z >= 0).all()
    assert w.shape == (2, 0) and w.is_neg()
    assert s != s
    neg, = fuzz.make_args([("tensor", (8,), "float32", {"view": "neg"})], 2)
    plain, = fuzz.make_args([("tensor", (8,), "float32")], 2)
    assert neg.is_neg() and torch.equal(neg.resolve_neg(), plain)


def test_the_generator_writes_hostile_programs():
    texts = [fuzz.generate(fuzz.program_seed(0, i)).module_text() for i in range(150)]
    joined = "\n".join(texts)
    for feature in ("'special'", "'view': 'neg'", "'view': 'T'", "'view': 'step'", "('scalar', 'float'",
                    "('scalar', 'auto-int'", "('scalar', 'bool'", ", 0)", "'positive': True"):
        assert feature in joined, feature
    # pieces of a split used afterwards, torch's math in its spellings, every dtype, wide shapes
    for feature in ("chunk(", ".split(", "torch.split(", "torch.nn.functional.", "torch.atan2(",
                    *(f"'{d}'" for d in fuzz.FLOATS + fuzz.INTS + ("bool",))):
        assert feature in joined, feature
    assert any(f".{name}()" in joined for name in fuzz.TORCH_MATH)  # the tensor method spelling
    assert any(d in fuzz.WIDE_INNER for t in texts for spec in eval(t.split("ARGS = ")[1].splitlines()[0])  # noqa: S307
               if spec[0] == "tensor" for d in spec[1][-1:])
    assert any("(0," in t.split("ARGS")[1] or ", 0)" in t.split("ARGS")[1] for t in texts)
    assert any(max(math.prod(spec[1]) for spec in eval(t.split("ARGS = ")[1].splitlines()[0])  # noqa: S307
                   if spec[0] == "tensor") >= 4096 for t in texts)


def test_the_generators_dtypes_for_divisions_by_a_runtime_scalar_are_torchs():
    """`x / (abs(s) + 1)`, `x % ...`, `x // ...` with `s` a run-time scalar: the generator's dtype is
    torch's (a Python float against an int8 tensor: float32), so its `if` paths agree as in torch."""
    g = fuzz.Generator(5)
    x, s = torch.tensor([3, -1, 0, 7], dtype=torch.int8), 1.5
    checked = set()
    for _ in range(300):
        g.pool = [fuzz.V("x", "int8", (4,), 7), fuzz.V("s", "float64", (), 1.5, 1, weak=True)]
        for make in (g.divide, g.floor_div_mod):
            v = make(0)
            if v is None or "abs(s)" not in v.code or v.code.count("x") != 1:
                continue
            got = eval(v.code, {"x": x, "s": s})  # noqa: S307 - the generator's own expression
            assert isinstance(got, torch.Tensor) and fuzz.NAMES[got.dtype] == v.dtype, (v.code, v.dtype)
            checked.add(v.code.split()[1])
    assert checked == {"/", "//", "%"}


@pytest.mark.skipif(not hasattr(signal, "SIGSEGV"), reason="POSIX signals")
def test_an_isolated_run_reports_a_dead_process_and_goes_on(tmp_path, monkeypatch):
    """The worker child dies on one program (an environment hook kills it): a 'fatal' finding with a
    reproducer, and the programs after it still run."""
    monkeypatch.setenv("BT_FUZZ_KILL_AT", "0")
    report = fuzz.run_isolated(2, seed=5, out=tmp_path, minimise_failures=False)
    kinds = [o.kind for _, o, _ in report.failures]
    assert report.programs == 2 and kinds[0] == "fatal", report.summary()
    fatal = next(path for _, o, path in report.failures if o.kind == "fatal")
    assert "SIGSEGV" in fatal.read_text() and "def f(" in fatal.read_text()
