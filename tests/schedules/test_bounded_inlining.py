"""Dlight's GPU rules inline a whole kernel before looking at it: a chain of NaN-aware max/min (relu6)
inlined grows exponentially, and a CUDA build of one (fuzz 40000891) never ended. `Bounded` declines
such kernels for Dlight's rules, and BoundedFallback inlines within babytriton's bound."""
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from tvm import te, tirx

import babytriton as bt
from babytriton.schedules.fallback import INLINED_LIMIT, inlined_size


def relu6_chain(x: bt.Tensor((1,), "float32")):
    for i in range(6):
        x = relu6(x) - x  # noqa: F821 - babytriton's relu6, as user code names it
    return x


def torch_chain(x):
    for i in range(6):
        x = torch.nn.functional.relu6(x) - x
    return x


cpu_chain = bt.jit(cache=False)(relu6_chain)


@pytest.mark.parametrize("value", [0.5, -3.0, 7.0, float("nan"), float("inf"), -float("inf")])
def test_relu6_chain_matches_torch_on_cpu(value):
    x = torch.tensor([value])
    torch.testing.assert_close(cpu_chain(x), torch_chain(x), equal_nan=True)


BUILD = textwrap.dedent("""
    import sys, tvm, babytriton as bt
    sys.path.insert(0, {folder!r})
    from test_bounded_inlining import relu6_chain
    k = bt.jit(target=tvm.target.Target({{"kind": "cuda", "arch": "sm_90"}}), cache=False)(relu6_chain).compile()
    print(k.fusion[0].rule, "|", k.fusion[0].why)
    open({source!r}, "w").write(k.source)
""")


def test_relu6_chain_builds_for_sm90_in_bounded_time(tmp_path):
    folder = str(__import__("pathlib").Path(__file__).parent)
    source = tmp_path / "kernel.cu"
    done = subprocess.run([sys.executable, "-c", BUILD.format(folder=folder, source=str(source))],
                          capture_output=True, text=True, timeout=120)  # unbounded, it ran for hours
    assert done.returncode == 0, done.stderr[-3000:]
    rule, why = done.stdout.strip().splitlines()[-1].split(" | ")
    assert rule == "dlight.gpu.Fallback" and f"over {INLINED_LIMIT}" in why, done.stdout
    assert len(source.read_text()) < 100_000  # bounded expressions (unbounded: millions of nodes)
    if shutil.which("nvcc"):
        from test_schedules import nvcc_ptx
        assert b".entry" in nvcc_ptx(source.read_text())


def clamp_chain(levels: int):
    """A kernel of `levels` blocks, each `p < 0 ? 0 : p` of the one before (p named twice)."""
    def level(p):
        return te.compute((4,), lambda i: tirx.Select(p[i] < 0.0, tirx.const(0.0, "float32"), p[i]))
    x = y = te.placeholder((4,), "float32", name="x")
    for _ in range(levels):
        y = level(y)
    return te.create_prim_func([x, y])


def test_inlined_size_counts_each_use_of_a_producer():
    sizes = [inlined_size(clamp_chain(n)) for n in (1, 2, 3)]
    # p is named in the condition (walked CONDITION_VISITS times) and in an arm: 4x a level
    assert sizes[1] - 4 * sizes[0] == sizes[2] - 4 * sizes[1] > 0, sizes
    assert inlined_size(clamp_chain(40)) > 2 ** 40  # counted without building it


@pytest.mark.parametrize("levels", [1, 2, 5, 6, 11, 12])
def test_inlining_keeps_a_block_where_selects_would_nest_past_the_bound(levels):
    """TVM's simplifier walks a select's condition several times and each arm under it, so a chain
    of clamps costs it about 40x more per clamp inlined: the inliner merges blocks only while one
    expression's cost, conditions weighted CONDITION_VISITS, stays within MAX_TREE_SIZE, and still
    merges up to it (a level here costs 4x the one before)."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from babytriton.schedules.inlining import GPU_CALL_DEPTH, MAX_TREE_SIZE, Costs, inline
    sch = s_tir.Schedule(clamp_chain(levels))
    left = [info.block_rv for info in inline(sch, normalize_prim_func(sch), GPU_CALL_DEPTH)]
    # a block of k levels prints 2**k - 1 selects (TVMScript writes the tree)
    depths = [(str(sch.get(b).body).count("T.Select") + 1).bit_length() - 1 for b in left]
    costs = Costs()
    assert sum(depths) == levels and all(costs.cost(sch.get(b).body.value) <= MAX_TREE_SIZE for b in left), depths
    assert all(costs.merged(sch.get(p), sch.get(c)) > MAX_TREE_SIZE for p, c in zip(left, left[1:])), depths
    assert len(left) == 1 or max(depths) >= 3, depths


def p79(x: bt.Tensor((64, 2048), "float32"), y: bt.Tensor((2048,), "float32")):
    h = x - y
    h = torch.log1p(h.abs())
    h = torch.nn.functional.leaky_relu(h, 0.1)
    h = -h
    a, g = h.split(1024, dim=1)
    return a * torch.erf(g)


def test_a_deep_nest_of_unchained_selects_is_inlined():
    """p79 of the performance fuzzer: its selects nest 7 deep, but each condition reads a value once,
    and the one kernel of it builds in about a second; a bound on depth alone had sent it to four
    launches through memory."""
    k = bt.jit(target={"kind": "cuda", "arch": "sm_90"})(p79).compile()
    assert [kernel.rule for kernel in k.fusion] == ["Elementwise"], str(k.fusion)
    assert len(re.findall(r"__global__[^;]*\{", k.source)) == 1, k.source  # one launch, no intermediates
    x, y = torch.randn(64, 2048), torch.randn(2048)
    x[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    torch.testing.assert_close(bt.jit(target="cpu")(p79)(x, y), p79(x, y), equal_nan=True)


@pytest.mark.parametrize("value", [0.5, -4.0, 4.0, float("nan"), float("inf"), -float("inf")])
def test_a_long_clamp_chain_matches_torch_on_cpu(value):
    def chain(x: bt.Tensor((3,), "float32")):
        for i in range(7):
            x = x.clamp(-3.0 + i * 0.1, 3.0 - i * 0.1) * 1.5
        return x

    x = torch.tensor([value, -value, 1.0])
    expected = x
    for i in range(7):
        expected = expected.clamp(-3.0 + i * 0.1, 3.0 - i * 0.1) * 1.5
    torch.testing.assert_close(bt.jit(cache=False)(chain)(x), expected, equal_nan=True)
