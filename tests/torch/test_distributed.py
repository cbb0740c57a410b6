"""@jit functions in models trained with torch.distributed (benchmarks/distributed.py): DDP and FSDP2
(`fully_shard`) on two processes give the one-process losses, the ranks compile each version once
between them (the disk cache's entry lock), and each rank's kernels run on its own GPU; a call's
tensors on two GPUs are an error naming both."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm

import babytriton as bt
from babytriton.core.types import Param
from babytriton.frontend import devices
from babytriton.frontend.arguments import ArgSpec
from babytriton.runtime import kernel

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "distributed.py"
sys.path.insert(0, str(SCRIPT.parent))
import distributed  # noqa: E402

TINY = ["--steps=4", "--warmup=1", "--batch=4", "--seq=8", "--vocab=32", "--width=16", "--heads=2", "--blocks=1"]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


def one_process(device: str) -> list[float]:
    with torch.random.fork_rng(devices=[]):   # the script seeds torch; the suite's other tests keep theirs
        return distributed.run(distributed.arguments(["--mode=single", f"--device={device}", *TINY]))[0]["losses"]


def two_ranks(device: str, cache: Path) -> list[dict]:
    """ddp, then fsdp, in one torchrun of two ranks sharing a fresh disk cache: rank 0's results."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(SCRIPT),
               "--mode", "ddp", "fsdp", f"--device={device}", *TINY]
    env = {**os.environ, "BABYTRITON_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    # (stdout says how far rank 0 got: a report a mode, printed before the process group ends)
    assert done.returncode == 0, f"stdout: {done.stdout[-1500:]}\nstderr: {done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def check_training(device: str, cache: Path) -> list[dict]:
    """The two-rank losses equal the one-process losses; each version is compiled by one rank and
    loaded from disk by the other. Each rank's report."""
    reference = one_process(device)
    runs = two_ranks(device, cache)
    assert [run["mode"] for run in runs] == ["ddp", "fsdp"]
    for run in runs:
        assert run["world"] == 2
        np.testing.assert_allclose(run["losses"], reference, rtol=distributed.TOLERANCE, err_msg=run["mode"])
    ranks = runs[-1]["ranks"]
    for name in ranks[0]["cache"]:
        first, second = (rank["cache"][name] for rank in ranks)
        versions = first["compilations"] + first["disk_hits"]
        assert versions > 0 and second["compilations"] + second["disk_hits"] == versions, name
        assert first["compilations"] + second["compilations"] == versions, (name, first, second)
    return ranks


def test_ddp_and_fsdp_on_two_cpu_processes_match_one_process(tmp_path):
    check_training("cpu", tmp_path / "cache")


@pytest.mark.gpu
@two_gpus
def test_ddp_and_fsdp_on_two_gpus_match_one_gpu_and_stay_on_their_gpu(tmp_path):
    for index, rank in enumerate(check_training("cuda", tmp_path / "cache")):
        assert rank["device"] == f"cuda:{index}"
        assert not any(rank["memory_on_other_gpus"].values()), rank   # nothing allocated on the other GPU
        if rank["contexts_on"] is not None:   # nvidia-ml installed: no CUDA context on the other GPU either
            assert rank["contexts_on"] == [index], rank


def test_scaling_is_two_gpus_samples_per_second_over_one_gpus():
    s = distributed.speedup({"samples_per_second": 60.0}, {"samples_per_second": 40.0})
    assert s["throughput_ratio"] == pytest.approx(1.5) and s["efficiency"] == pytest.approx(0.75)


# --------------------------------------------------------------------------------------------------
# one call, one GPU: which GPU a call runs on
# --------------------------------------------------------------------------------------------------

class OnGPU(torch.Tensor):
    """A CPU tensor that says it is on a given GPU: for the checks that only read `.device`."""
    index = 0

    @property
    def device(self):
        return torch.device("cuda", self.index)

    @property
    def is_cuda(self):
        return True


def on_gpu(index: int) -> torch.Tensor:
    return torch.Tensor._make_subclass(type(f"OnGPU{index}", (OnGPU,), {"index": index}), torch.ones(2))


def test_tensors_of_one_call_on_two_gpus_are_an_error_naming_both():
    params = [Param("x", "auto"), Param("y", "auto")]
    devices.check_devices(params, (on_gpu(1), on_gpu(1)), "cuda", "f")     # any one GPU is fine
    with pytest.raises(TypeError, match=r"f\(\): parameter 'x' is on cuda:0 but 'y' is on cuda:1; a call runs on one"):
        devices.check_devices(params, (on_gpu(0), on_gpu(1)), "cuda", "f")


def test_a_call_runs_on_its_tensors_gpu_and_its_scalars_are_made_there(monkeypatch):
    specs = (ArgSpec("scalar", dtype="float64"), ArgSpec("tensor", dtype="float32", shape=(2,)))
    assert kernel._cuda_index(specs, (1.0, on_gpu(1))) == 1
    assert kernel._cuda_index(specs, (1.0, torch.ones(2))) == 0
    made = []
    monkeypatch.setattr(torch, "scalar_tensor", lambda value, dtype, device: made.append(device))
    kernel._scalar_converter("float32", "cuda", 1)(2.0)     # not torch's current GPU: the call's
    kernel._scalar_converter("float32", "cpu", 0)(2.0)
    assert made == [torch.device("cuda", 1), torch.device("cpu")]


def test_a_layout_tvm_cannot_take_is_copied_into_a_torch_tensor():
    """So that tvm_ffi still reads torch's current stream from it (a TVM tensor carries none)."""
    view = torch.arange(32.0).reshape(8, 4).t()
    copy = kernel._compact(view)
    assert type(copy) is torch.Tensor and copy.is_contiguous() and copy.data_ptr() % 64 == 0
    assert torch.equal(copy, view)
    assert kernel._compact(copy) is copy
    negated = kernel._compact(torch.ones(4)._neg_view())
    assert not negated.is_neg() and torch.equal(negated, -torch.ones(4))


def scale_add(x, y, alpha: float):
    return x * alpha + y


def test_the_host_code_of_a_gpu_version_sets_its_tensors_gpu_before_launching():
    """What lets one compiled version serve every GPU: TVM's host code calls __tvm_set_device with its
    first tensor's device before its launches (which go to the current device)."""
    f = bt.jit(target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), cache=False)(scale_add)
    modules, sources = [f.compile(torch.ones(4, 8), torch.ones(4, 8), 2.0).executable.mod], []
    while modules:
        module = modules.pop()
        modules.extend(module.imports)
        if module.kind == "llvm":
            sources.append(module.inspect_source("ll"))
    assert sources and all("__tvm_set_device" in source for source in sources)


# --------------------------------------------------------------------------------------------------
# on GPUs
# --------------------------------------------------------------------------------------------------

@pytest.mark.gpu
@two_gpus
def test_a_function_first_called_on_cuda0_runs_on_cuda1():
    f = bt.jit(target="gpu", cache=False)(scale_add)
    for index in (0, 1):
        x, y = torch.randn(64, 32, device=f"cuda:{index}"), torch.randn(64, 32, device=f"cuda:{index}")
        with torch.cuda.device(1 - index):   # torch's current GPU is the other one: the call follows its tensors
            out = f(x, y, 2.0)
            assert torch.cuda.current_device() == 1 - index   # and the caller's current GPU stays theirs
        assert out.device == x.device
        torch.testing.assert_close(out, x * 2.0 + y)
    assert f.cache_info()["compilations"] == 1     # one compiled version, loaded on each GPU
    with pytest.raises(TypeError, match=r"'x' is on cuda:0 but 'y' is on cuda:1"):
        f(torch.ones(4, device="cuda:0"), torch.ones(4, device="cuda:1"), 1.0)


@pytest.mark.gpu
@two_gpus
def test_a_backward_runs_on_the_gpu_of_its_tensors():
    f = bt.jit(target="gpu", cache=False)(scale_add)
    x = torch.randn(16, 8, device="cuda:1", requires_grad=True)
    y = torch.randn(16, 8, device="cuda:1", requires_grad=True)
    torch.cuda.reset_peak_memory_stats(0)
    before = torch.cuda.memory_allocated(0)
    f(x, y, 3.0).sum().backward()
    assert torch.cuda.current_device() == 0
    assert x.grad.device == torch.device("cuda:1")
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))
    torch.testing.assert_close(y.grad, torch.ones_like(y))
    assert torch.cuda.max_memory_allocated(0) == before    # torch made nothing on cuda:0 meanwhile


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["relax", "relax-misaligned", "tir"])
def test_a_call_runs_on_torchs_current_stream(backend):
    """A side stream that is still writing the input when the call is queued: run on any other stream,
    the call would read the input before the write. A misaligned input is copied first (_compact)."""
    if backend.startswith("relax"):
        f = bt.jit(target="gpu", cache=False)(scale_add)
        skip = 1 if backend == "relax-misaligned" else 0

        def call(x, out):
            out.copy_(f(x[skip:], x[skip:], 1.0))
    else:
        @bt.jit(target="gpu", backend="tir", cache=False)
        def double(x: bt.Tensor(("n",), "float32"), out: bt.Tensor(("n",), "float32")):
            for i in bt.parallel(x.shape[0]):
                out[i] = x[i] + x[i]

        def call(x, out):
            double(x, out)
    n = 1 << 20
    x = torch.zeros(n + 1, device="cuda")
    out = torch.empty(n + 1 if backend != "relax-misaligned" else n, device="cuda")
    call(x, out)   # compiled and loaded before the timed part
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)   # ~0.1 s of GPU time on this stream
        x.fill_(1.0)
        call(x, out)
    torch.cuda.synchronize()
    assert torch.all(out == 2.0)
