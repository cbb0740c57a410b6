"""frontend/function.py: what the compiler knows of a function before a call, options resolved once."""
import pytest
import torch

import babytriton as bt
from babytriton.frontend import function as frontend
from babytriton.core import targets

M = bt.Tensor(("m", "k"), "float16")
N = bt.Tensor(("k", "n"), "float16")


def matmul_twice(a: M, b: N, c: N, scale: bt.constexpr = 2):
    return (a @ b) + (a @ c) * scale


def count_resolutions(monkeypatch) -> list:
    calls = []
    resolve = targets.resolve_target

    def counted(target):
        calls.append(target)
        return resolve(target)
    monkeypatch.setattr(targets, "resolve_target", counted)
    return calls


@pytest.mark.parametrize("target", ["cpu", "cuda"])   # CUDA code is generated without a GPU too
def test_the_target_is_resolved_once_per_function(monkeypatch, target):
    calls = count_resolutions(monkeypatch)
    f = bt.jit(matmul_twice, target=target, cache=False)
    assert calls == []                           # deciding nothing at decoration: no device is touched
    f.compile()
    f.compile(*(torch.ones(shape, dtype=torch.float16) for shape in ((2, 3), (3, 4), (3, 4))), 3)
    assert f.cache_info()["compilations"] == 2
    assert calls == [target]                     # not again per version, kernel call or matrix product


@pytest.mark.usefixtures("products_as_kernels")
@pytest.mark.parametrize("target, schedule, kind, offload", [
    ("cpu", "dlight", "cpu", targets.MatmulOffload(("bfloat16",))),
    ("cuda", "dlight", "cuda", targets.MatmulOffload(("float16", "bfloat16", "float32"))),
    ("cuda", "fallback", "cuda", targets.MatmulOffload())])
def test_codegen_options(target, schedule, kind, offload):
    info = frontend.FunctionInfo(matmul_twice, {**bt.jit(matmul_twice).options, "target": target,
                                                "schedule": schedule, "unroll": 4})
    options = info.codegen_options
    assert (options.device_kind, options.matmul_offload, options.unroll, options.schedule) == \
        (kind, offload, 4, schedule)
    assert options.target is info.target and targets.device_kind(options.target) == kind


def test_the_jit_function_reads_its_info():
    f = bt.jit(matmul_twice)
    assert isinstance(f, frontend.Decorated) and f.info.name == "matmul_twice"
    assert [p.name for p in f.info.params] == ["a", "b", "c", "scale"] and f.params is f.info.params
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'cc'; did you mean 'c'\?"):
        f.info.bind((1, 2), {"cc": 3})
