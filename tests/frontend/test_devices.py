"""`with bt.device(...)` blocks: operations on the CPU and the GPU in one function (frontend/devices.py)."""
import inspect
import re

import numpy as np
import pytest
import torch
import tvm

import babytriton as bt

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
INTERNALS = ("Traceback", "tvm", "TVM", ".cc", "babytriton/", "InternalError")


def line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def body(stage: str) -> str:
    """The Relax function of a stage's module (after the PrimFuncs)."""
    return stage.split("@R.function")[-1]


def mixed(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
    with bt.device("cpu"):
        s = a + b
    with bt.device("gpu"):
        out = s + a
    return out


# --------------------------------------------------------------------------------------------------
# the IR and the build (no GPU needed)
# --------------------------------------------------------------------------------------------------

def test_issue_example_has_vdevices_copies_and_both_sources():
    k = bt.jit(mixed, target=CUDA).compile()
    relax_fn = body(k.stages["relax"])
    # arguments annotated on the target's device; the CPU block works on copies, made by the compiler
    assert 'a: R.Tensor((2, 3), dtype="float32", vdevice="cuda:0' in relax_fn
    assert 'a_cpu: R.Tensor((2, 3), dtype="float32", vdevice="llvm:0:global") = R.to_vdevice(a' in relax_fn
    assert 's: R.Tensor((2, 3), dtype="float32", vdevice="llvm:0:global") = R.add(a_cpu, b_cpu)' in relax_fn
    assert "s_gpu" in relax_fn and "R.add(s_gpu, a)" in relax_fn
    assert relax_fn.count("R.to_vdevice(") == 3
    assert list(k.stages)[:4] == ["python", "ast", "relax", "RealizeVDevice"]
    assert "PlaceOnDevices" in k.stages and "schedule" in k.stages
    assert "// ===== llvm =====" in k.source and "// ===== cuda =====" in k.source
    assert "__global__" in k.source and "define" in k.source
    assert k.vm_devices == [tvm.cpu(0), tvm.cuda(0)]
    assert k.executable is not None


def chains(x: bt.Tensor(("n", 4), "float32"), w: bt.Tensor(("n", 4), "float32"), k: float):
    with bt.device("cpu"):
        h = (x + w) * 2.0
        h = h * k
    with bt.device("gpu"):
        g = h * x + 1.0
        g = g * g + h
        g = g if g > 0.0 else 0.0
    y = g * 3.0
    return y, h


def test_fusion_keeps_each_device_apart():
    x = torch.ones(5, 4)
    k = bt.jit(chains, target=CUDA).compile(x, x, 2.0)
    fused = body(k.stages["FuseTIR"])
    kernels = re.findall(r"R\.call_tir\(cls\.(\w+)", fused)
    assert any(n.startswith("fused_") and n.endswith("_llvm") for n in kernels), kernels
    cuda = [n for n in kernels if n.endswith("_cuda")]
    assert len(cuda) == 1 and cuda[0].startswith("fused_"), kernels    # the whole GPU chain: one kernel
    assert all(n.endswith(("_llvm", "_cuda")) for n in kernels)
    # the number of `g if g > 0.0 else 0.0` is written into the GPU kernel: no constant buffer to copy
    assert "R.const(0.0" not in body(k.stages["PlaceOnDevices"])
    # every kernel is compiled for its own device
    module = k.module
    for gvar, func in module.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            assert func.attrs["target"].kind.name == ("cuda" if gvar.name_hint.endswith("_cuda") else "llvm")


def with_a_tensor_constant(x: bt.Tensor(("n", 4), "float32")):
    with bt.device("gpu"):
        g = x + torch.tensor([1.0, 2.0, 3.0, 4.0])
    return g


def test_a_constant_tensor_is_copied_to_the_gpu_that_reads_it():
    """The VM keeps constants on the CPU: one a GPU kernel reads from memory is copied there first."""
    k = bt.jit(with_a_tensor_constant, target=CUDA).compile(torch.ones(5, 4))
    placed = body(k.stages["PlaceOnDevices"])
    made = re.search(r'(\w+) = R\.call_tir\(cls\.\w+, \(metadata\["ir\.GenericConst"\]', placed)
    assert made, placed
    assert re.search(rf'= R\.to_vdevice\({made.group(1)}, dst_vdevice="cuda', placed), placed


def test_arguments_stay_where_the_caller_put_them():
    x = torch.ones(5, 4)
    k = bt.jit(chains, target=CUDA).compile(x, x, 2.0)          # CPU tensors for a GPU function
    relax_fn = body(k.stages["relax"])
    assert 'x: R.Tensor((n, 4), dtype="float32", vdevice="llvm:0' in relax_fn
    assert 'k: R.Tensor((), dtype="float64", vdevice="llvm:0' in relax_fn   # scalars are made on the CPU
    assert "x_gpu" in relax_fn and "x_cpu" not in relax_fn
    assert [s.device for s in k.specs] == ["cpu", "cpu", "cpu"]
    on_gpu = bt.jit(chains, target=CUDA).compile()                # from the annotations: the target's device
    assert [s.device for s in on_gpu.specs] == ["cuda:0", "cuda:0", "cpu"]


def results(a: bt.Tensor((3,), "float32"), b: bt.Tensor((3,), "float32")):
    with bt.device("cpu"):
        on_cpu = a + b
        same = on_cpu
    with bt.device("gpu"):
        on_gpu = on_cpu * 2.0
        same = on_cpu
    return on_cpu, on_gpu, same, a, on_gpu + 1.0


def result_devices(fn, target) -> list[str]:
    k = bt.jit(fn, target=target).compile()
    signature = body(k.stages["relax"]).split("\n")[1]
    returned = signature.split("-> ")[1]
    return re.findall(r'vdevice="(\w+):', returned)


def test_where_results_come_back():
    # a variable: the device of the block of its last assignment; otherwise the target's device
    assert result_devices(results, CUDA) == ["llvm", "cuda", "cuda", "cuda", "cuda"]
    assert result_devices(results, "cpu") == ["llvm", "cuda", "cuda", "llvm", "llvm"]


def return_in_block(a: bt.Tensor((3,), "float32")):
    with bt.device("cpu"):
        return a * 2.0


def test_a_return_inside_a_block_gives_that_blocks_device():
    assert result_devices(return_in_block, CUDA) == ["llvm"]


def cpu_only(a: bt.Tensor(("n",), "float32"), b: bt.Tensor(("n",), "float32"), k: float):
    with bt.device("cpu"):
        s = a * k + b
    t = s * s
    return t, s


def test_cpu_blocks_run_here_and_match_torch():
    f = bt.jit(cpu_only, target="cpu")
    a, b = torch.randn(7), torch.randn(7)
    t, s = f(a, b, 0.5)
    torch.testing.assert_close(s, a * 0.5 + b)
    torch.testing.assert_close(t, (a * 0.5 + b) ** 2)
    tn, sn = f(a.numpy(), b.numpy(), 0.5)          # numpy in, numpy out
    np.testing.assert_allclose(sn, (a * 0.5 + b).numpy(), rtol=1e-6)
    k = f.compile(a, b, 0.5)
    assert "cuda" not in k.stages["relax"]          # only the devices used are in the module
    assert k.vm_devices == [tvm.cpu(0)]
    t2, s2 = k(a, b, 0.5)                            # a Kernel is callable too
    torch.testing.assert_close(t2, t)


def test_cpu_block_in_a_cpu_function_with_a_gpu_block_builds():
    def f(a: bt.Tensor((8,), "float32")):
        with bt.device("gpu"):
            b = a * a
        with bt.device("cpu"):
            c = b + a
        return c

    k = bt.jit(f, target="cpu").compile()
    assert "a_gpu" in k.stages["relax"] and "b_cpu" in k.stages["relax"]
    assert "__global__" in k.source


# --------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------

def nested(a: bt.Tensor((2,), "float32")):
    with bt.device("cpu"):
        with bt.device("gpu"):  # error
            b = a + 1.0
    return b


def unknown(a: bt.Tensor((2,), "float32")):
    with bt.device("tpu"):  # error
        b = a + 1.0
    return b


def named(a: bt.Tensor((2,), "float32")):
    with bt.device("cpu") as d:  # error
        b = a + 1.0
    return b


def other_context(a: bt.Tensor((2,), "float32")):
    with open("data.txt"):  # error
        b = a + 1.0
    return b


def two_devices(a: bt.Tensor((2,), "float32")):
    with bt.device("cpu"), bt.device("gpu"):  # error
        b = a + 1.0
    return b


def not_a_name(a: bt.Tensor((2,), "float32")):
    with bt.device(0):  # error
        b = a + 1.0
    return b


@pytest.mark.parametrize("fn,words", [
    (nested, "device blocks cannot be nested: this one is inside `with bt.device('cpu')` on line"),
    (unknown, "unknown device 'tpu'; use 'cpu' (or 'llvm') or 'gpu' (or 'cuda')"),
    (named, "drop the `as ...`"),
    (other_context, "only `with bt.device(...)` blocks are supported"),
    (two_devices, "takes one `bt.device(...)`"),
    (not_a_name, "takes a device name ('cpu' or 'gpu'), got int 0"),
])
def test_errors_point_at_the_block(fn, words):
    with pytest.raises(bt.CompilationError) as info:
        bt.jit(fn, target=CUDA).compile()
    err = info.value
    assert err.lineno == line_of(fn, "# error"), str(err)
    assert words in err.message, err.message
    for word in INTERNALS:
        assert word not in str(err).replace(err.source_line, ""), str(err)


def test_outside_jit_a_block_is_an_error():
    with pytest.raises(RuntimeError, match=r"only has a meaning inside a @jit function"):
        with bt.device("cpu"):
            pass
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        bt.device("tpu")
    assert repr(bt.device("gpu")) == "bt.device('gpu')"


# --------------------------------------------------------------------------------------------------
# on a GPU
# --------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_issue_example_runs_on_the_gpu():
    f = bt.jit(mixed, target="gpu")
    a, b = torch.randn(2, 3, device="cuda"), torch.randn(2, 3, device="cuda")
    out = f(a, b)
    assert out.is_cuda
    torch.testing.assert_close(out, a + b + a)
    ac, bc = a.cpu(), b.cpu()                       # the same function on CPU arguments: moved as needed
    out = f(ac, bc)
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), ac + bc + ac)


@pytest.mark.gpu
def test_chains_and_result_devices_on_the_gpu():
    f = bt.jit(chains, target="gpu")
    x, w = torch.randn(6, 4, device="cuda"), torch.randn(6, 4, device="cuda")
    y, h = f(x, w, 1.5)
    href = (x + w) * 2.0 * 1.5
    g = href * x + 1.0
    g = g * g + href
    torch.testing.assert_close(h.cuda(), href)
    torch.testing.assert_close(y, torch.where(g > 0, g, 0.0) * 3.0)
    assert y.is_cuda and not h.is_cuda               # h was last assigned in the CPU block
    r = bt.jit(results, target="cpu")
    a, b = torch.randn(3), torch.randn(3)
    on_cpu, on_gpu, same, a_out, last = r(a, b)
    assert [t.device.type for t in (on_cpu, on_gpu, same, a_out, last)] == ["cpu", "cuda", "cuda", "cpu", "cpu"]
    torch.testing.assert_close(on_gpu.cpu(), (a + b) * 2)
    torch.testing.assert_close(last, (a + b) * 2 + 1)
