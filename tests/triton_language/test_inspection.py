"""Seeing a compiled Triton kernel as a @jit user sees a version: `kernel.warmup(...)` (stages, source,
a printed summary) and `python -m babytriton show FILE.py:KERNEL`."""
from __future__ import annotations

import runpy
import textwrap

import pytest
import torch

from babytriton import cli

KERNEL_FILE = textwrap.dedent('''
    import babytriton.triton as triton
    import babytriton.triton.language as tl

    @triton.jit
    def row_sum(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(x, axis=0))

    tuned = triton.autotune([triton.Config({"BLOCK": 64})], key=["n_cols"])(row_sum)
''')


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "row_sum_file.py"
    path.write_text(KERNEL_FILE)
    return path


def test_warmup_shows_the_stages_and_the_source(kernel_file):
    row_sum = runpy.run_path(str(kernel_file))["row_sum"]
    x = torch.randn(3, 50)[:, :40]   # a view with a row stride other than its width
    out = torch.empty(3)
    kernel = row_sum.warmup(x, out, 40, x.stride(0), BLOCK=64, grid=(3,))
    assert list(kernel.stages) == ["python", "block", "schedule", "source"]
    assert kernel.source == kernel.stages["source"] and "define" in kernel.source   # LLVM IR on a CPU
    assert "def row_sum" in kernel.stages["python"] and "T.prim_func" in kernel.stages["block"]
    text = str(kernel)
    assert text.startswith("<CompiledKernel row_sum for cpu, ") and "schedule" in text and "lines" in text
    row_sum[(3,)](x, out, 40, x.stride(0), BLOCK=64)   # the warmed-up kernel is the one that runs
    torch.testing.assert_close(out, x.sum(1))


def test_warmup_for_another_target_gives_cuda_without_a_gpu(kernel_file):
    row_sum = runpy.run_path(str(kernel_file))["row_sum"]
    kernel = row_sum.warmup(torch.empty(4, 64, device="meta"), torch.empty(4, device="meta"), 64, 64, BLOCK=64,
                            target="cuda")
    assert kernel.device_kind == "cuda" and "__global__" in kernel.source


def test_cli_show_lists_a_triton_kernels_stages(kernel_file, capsys):
    assert cli.main(["show", f"{kernel_file}:row_sum", "--args", "4,50", "4", "=50", "=50", "64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("row_sum(x_ptr: *float32[4, 50], out_ptr: *float32[4], n_cols: 50, stride: 50, BLOCK: 64)")
    for stage in ("python", "block", "schedule", "source"):
        assert f"  {stage} " in out
    assert cli.main(["show", f"{kernel_file}:tuned", "--args", "4,50:float16", "4", "=50", "=50", "64",
                     "--stage", "block"]) == 0   # an autotuned kernel: its @triton.jit function
    assert "T.prim_func" in capsys.readouterr().out


def test_cli_show_prints_cuda_for_sm_90(kernel_file, capsys):
    assert cli.main(["show", f"{kernel_file}:row_sum", "--args", "4,50", "4", "=50", "=50", "64", "--target",
                     "sm_90", "--source"]) == 0
    assert "__global__" in capsys.readouterr().out


def test_cli_show_says_what_is_wrong_with_the_arguments(kernel_file, capsys):
    assert cli.main(["show", f"{kernel_file}:row_sum", "--args", "4,50"]) == 2
    assert "row_sum(x_ptr, out_ptr, n_cols, stride, BLOCK) takes 5 argument(s); --args gave 1" in \
        capsys.readouterr().err
