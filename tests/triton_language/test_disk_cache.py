"""Compiled Triton kernels in the disk cache (babytriton/triton/disk.py): a second process loads
instead of compiling, the key follows what changes the code, BABYTRITON_CACHE=0 and corrupt entries
behave as for @jit."""
from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import textwrap

import pytest
import torch

from babytriton.core import targets
from babytriton.runtime import cache
from babytriton.triton import disk
from babytriton.triton.language import core as tl

# A kernel file both processes run: an fp16 masked add through a @triton.jit helper, at a ragged size.
KERNEL_FILE = textwrap.dedent('''
    import json
    import torch
    import babytriton.triton as triton
    import babytriton.triton.language as tl

    @triton.jit
    def combine(a, b):
        return a + 2 * b

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, combine(x, y), mask=mask)

    def main(device="cpu"):
        n = 1000
        x = torch.randn(n, dtype=torch.float16, device=device)
        y = torch.randn(n, dtype=torch.float16, device=device)
        x[3], y[5] = float("nan"), float("inf")
        out = torch.empty_like(x)
        add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n, BLOCK=256)
        kernel = add_kernel.warmup(x, y, out, n, BLOCK=256)
        same = torch.equal(out.isnan(), (x + 2 * y).isnan()) and torch.allclose(out, x + 2 * y, equal_nan=True)
        return {"from_disk": kernel.from_disk, "equal": bool(same), "path": kernel.cache_path}

    if __name__ == "__main__":
        import sys
        print(json.dumps(main(*sys.argv[1:])))
''')


@pytest.fixture
def kernel_file(tmp_path, monkeypatch):
    """The kernel file and a fresh cache folder for this test (subprocesses inherit it)."""
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    cache._versions.cache_clear()   # babytriton's sources as the subprocess will read them, not at session start
    path = tmp_path / "add_kernel_file.py"
    path.write_text(KERNEL_FILE)
    return path


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_second_process_loads_the_kernel_from_disk(kernel_file, tmp_path, device):
    first = runpy.run_path(str(kernel_file))["main"](device)
    assert first["equal"] and not first["from_disk"] and first["path"]
    assert [str(p) for p in cache.entries(tmp_path / "cache")] == [first["path"]]
    done = subprocess.run([sys.executable, str(kernel_file), device], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    second = json.loads(done.stdout.strip().splitlines()[-1])
    assert second == {"from_disk": True, "equal": True, "path": first["path"]}, done.stderr


def test_cache_off_compiles_and_writes_nothing(kernel_file, tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE", "0")
    result = runpy.run_path(str(kernel_file))["main"]()
    assert result == {"from_disk": False, "equal": True, "path": None}
    assert not (tmp_path / "cache").exists() or cache.entries(tmp_path / "cache") == []


def test_a_corrupt_entry_warns_and_is_recompiled(kernel_file):
    first = runpy.run_path(str(kernel_file))["main"]()
    library = os.path.join(first["path"], "lib.so")
    with open(library, "r+b") as f:
        f.write(b"not a library")
    with pytest.warns(cache.CacheWarning, match="corrupt"):
        again = runpy.run_path(str(kernel_file))["main"]()   # a new JITFunction: nothing in memory
    assert again == {"from_disk": False, "equal": True, "path": first["path"]}
    assert runpy.run_path(str(kernel_file))["main"]()["from_disk"]   # the replaced entry loads


def _key(source: str, tmp_path, name: str, **constants):
    path = tmp_path / f"{name}.py"
    path.write_text("import babytriton.triton as triton\nimport babytriton.triton.language as tl\n"
                    + textwrap.dedent(source))
    kernel = runpy.run_path(str(path))["kernel"]
    signature = {"p": tl.pointer_type(tl.float32)}
    options = {"num_warps": 4, "target": "cpu", "equal_to_1": ()}
    return disk.make_key(kernel, signature, constants, options, targets.resolve_target("cpu"))


KERNEL = '''
@triton.jit
def helper(x):
    return x * {factor}

@triton.jit
def kernel(p, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(p + offs, helper(tl.load(p + offs)))
'''


def test_the_key_follows_the_callees_source_and_the_constexprs(tmp_path):
    base = _key(KERNEL.format(factor=2), tmp_path, "a", BLOCK=16)
    assert base.unstable is None
    assert _key(KERNEL.format(factor=2), tmp_path, "b", BLOCK=16).digest == base.digest
    other_helper = _key(KERNEL.format(factor=3), tmp_path, "c", BLOCK=16)
    assert other_helper.digest != base.digest
    [changed] = cache.differences(base.summary(), other_helper.summary())
    assert changed.startswith("global `helper`: @triton.jit helper (sha256 ")
    other_block = _key(KERNEL.format(factor=2), tmp_path, "d", BLOCK=32)
    assert cache.differences(base.summary(), other_block.summary()) == ["value of `BLOCK`: 16 → 32"]
