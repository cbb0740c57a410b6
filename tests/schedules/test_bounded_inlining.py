"""Dlight's GPU rules inline a whole kernel before looking at it: a chain of NaN-aware max/min (relu6)
inlined grows exponentially, and a CUDA build of one (fuzz 40000891) never ended. `Bounded` declines
such kernels for Dlight's rules, and BoundedFallback inlines within babytriton's bound."""
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
    assert sizes[1] - 2 * sizes[0] == sizes[2] - 2 * sizes[1] > 0, sizes  # doubling a level
    assert inlined_size(clamp_chain(40)) > 2 ** 40  # counted without building it
