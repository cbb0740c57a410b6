"""The disk cache: hits across processes, complete stages on a hit, switches, corrupt entries,
concurrent processes and threads, and what goes into the key."""
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
import tvm

import babytriton as bt
import chapter_zygote
from babytriton.runtime import cache

T23 = bt.Tensor((2, 3), "float32")
REPO = Path(__file__).resolve().parents[2]


def add_add(a: T23, b: T23):
    c = a + b
    d = c + a
    return d * 2.0


def expected(a, b):
    return (a + b + a) * 2.0


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A cache folder of the test's own, so entries of other tests never interfere."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(folder))
    monkeypatch.delenv("BABYTRITON_CACHE", raising=False)
    return folder


def entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*/*") if not p.name.startswith("."))


def args23():
    return torch.randn(2, 3), torch.randn(2, 3)


# --------------------------------------------------------------------------------------------------
# a hit, in another process and in this one
# --------------------------------------------------------------------------------------------------

SCRIPT = '''
import json, sys, time
import torch
import babytriton as bt

@bt.jit
def scaled_sum(a: bt.Tensor((4, 8), "float32"), b: bt.Tensor((4, 8), "float32")):
    c = a + b
    d = c * 3.0 + a
    return d

if len(sys.argv) > 2:  # a barrier: compile at the same moment as the other processes
    from pathlib import Path
    folder, count = Path(sys.argv[2]), int(sys.argv[3])
    (folder / sys.argv[1].replace("/", "_")).touch()
    deadline = time.time() + 120
    while len(list(folder.iterdir())) < count and time.time() < deadline:
        time.sleep(0.002)
a, b = torch.randn(4, 8), torch.randn(4, 8)
start = time.perf_counter()
out = scaled_sum(a, b)
elapsed = time.perf_counter() - start
torch.testing.assert_close(out, (a + b) * 3.0 + a)
k = scaled_sum.compile(a, b)
json.dump({"info": scaled_sum.cache_info(), "stages": k.stages, "from_disk": k.from_disk,
           "digest": k.cache_key.digest, "ms": elapsed * 1e3,
           "fusion": [[x.name, [op.line for op in x.ops]] for x in k.fusion]}, open(sys.argv[1], "w"))
'''


def run_script(tmp_path: Path, name: str, *extra, env=None) -> subprocess.Popen:
    script = tmp_path / "script.py"
    if not script.exists():
        script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **(env or {})}
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / name), *map(str, extra)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, tmp_path: Path, name: str) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads((tmp_path / name).read_text()), err


def test_a_second_process_loads_instead_of_compiling(tmp_path, cache_dir):
    # Different hash seeds: the key must not depend on Python's hash randomisation.
    first, _ = finish(run_script(tmp_path, "1.json", env={"PYTHONHASHSEED": "1"}), tmp_path, "1.json")
    second, err = finish(run_script(tmp_path, "2.json", env={"PYTHONHASHSEED": "2"}), tmp_path, "2.json")
    assert first["info"]["compilations"] == 1 and first["info"]["disk_writes"] == 1
    assert not first["from_disk"]
    assert second["info"]["compilations"] == 0 and second["info"]["disk_hits"] == 1
    assert second["from_disk"] and second["digest"] == first["digest"]
    assert second["stages"] == first["stages"]          # every stage, identical, on a hit
    assert second["fusion"] == first["fusion"]
    assert "Warning" not in err
    assert len(entries(cache_dir)) == 1


def test_stages_fusion_and_module_are_complete_on_a_hit(cache_dir):
    compiled = bt.jit(add_add).compile()
    loaded = bt.jit(add_add).compile()          # a new JITFunction: empty memory, warm disk
    assert not compiled.from_disk and loaded.from_disk
    assert loaded.stages == compiled.stages
    assert list(loaded.stages)[-1] == "source" and "fused_add_add" in loaded.source
    assert [(k.name, k.lines) for k in loaded.fusion] == [(k.name, k.lines) for k in compiled.fusion]
    assert "fused_add_add" in loaded.module.script()     # the lowered IR, read on demand
    a, b = args23()
    torch.testing.assert_close(loaded(a, b), expected(a, b))
    assert loaded.cache_path == compiled.cache_path and Path(loaded.cache_path).is_dir()


def test_each_version_is_its_own_entry(cache_dir):
    f = bt.jit(add_add_any)
    for dtype in (torch.float32, torch.float64):
        a, b = torch.randn(2, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype)
        torch.testing.assert_close(f(a, b), expected(a, b))
    torch.testing.assert_close(f(torch.ones(5), torch.ones(5)), expected(torch.ones(5), torch.ones(5)))
    assert f.cache_info()["disk_writes"] == 3 and len(entries(cache_dir)) == 3


def add_add_any(a, b):
    c = a + b
    d = c + a
    return d * 2.0


# --------------------------------------------------------------------------------------------------
# switches and where the cache lives
# --------------------------------------------------------------------------------------------------

def test_cache_false_keeps_nothing_on_disk(cache_dir):
    f = bt.jit(cache=False)(add_add)
    a, b = args23()
    torch.testing.assert_close(f(a, b), expected(a, b))
    assert entries(cache_dir) == [] and f.cache_info()["disk_writes"] == 0
    assert "off" in str(f.explain(a, b))


def test_environment_switch_turns_the_disk_cache_off(cache_dir, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE", "0")
    f = bt.jit(add_add)
    f.compile()
    bt.jit(add_add).compile()
    assert entries(cache_dir) == [] and f.cache_info()["compilations"] == 1


def test_cache_option_must_be_a_bool():
    with pytest.raises(TypeError, match="cache is True or False"):
        bt.jit(cache="no")


def test_default_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("BABYTRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "babytriton"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "babytriton"
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_an_unwritable_cache_warns_and_carries_on(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(blocker / "cache"))
    f = bt.jit(add_add)
    a, b = args23()
    with pytest.warns(cache.CacheWarning, match="could not write the disk cache entry of 'add_add'"):
        out = f(a, b)
    torch.testing.assert_close(out, expected(a, b))


# --------------------------------------------------------------------------------------------------
# corrupt entries: detected, recompiled, replaced
# --------------------------------------------------------------------------------------------------

def _truncate_library(entry: Path):
    data = (entry / "lib.so").read_bytes()
    (entry / "lib.so").write_bytes(data[: len(data) // 3])


def _garbage_library(entry: Path):
    (entry / "lib.so").write_bytes(b"\x7fELF" + b"\0" * 200)


def _truncate_metadata(entry: Path):
    text = (entry / "meta.json").read_text()
    (entry / "meta.json").write_text(text[: len(text) // 2])


def _wrong_metadata(entry: Path):
    meta = json.loads((entry / "meta.json").read_text())
    meta["stages"] = ["not", "a", "dict"]
    (entry / "meta.json").write_text(json.dumps(meta))


def _wrong_fusion_record(entry: Path):
    meta = json.loads((entry / "meta.json").read_text())
    meta["fusion"] = {"kernels": "?"}
    (entry / "meta.json").write_text(json.dumps(meta))


def _delete_library(entry: Path):
    (entry / "lib.so").unlink()


def _delete_metadata(entry: Path):
    (entry / "meta.json").unlink()


@pytest.mark.parametrize("damage", [_truncate_library, _garbage_library, _truncate_metadata, _wrong_metadata,
                                    _wrong_fusion_record, _delete_library, _delete_metadata])
def test_a_corrupt_entry_is_recompiled_and_replaced(cache_dir, damage):
    bt.jit(add_add).compile()
    (entry,) = entries(cache_dir)
    damage(entry)
    f = bt.jit(add_add)
    a, b = args23()
    with pytest.warns(cache.CacheWarning, match="is corrupt .*recompiling and replacing it"):
        out = f(a, b)
    torch.testing.assert_close(out, expected(a, b))
    assert f.cache_info()["compilations"] == 1 and f.cache_info()["disk_writes"] == 1
    again = bt.jit(add_add)          # the replacement is a good entry
    torch.testing.assert_close(again(a, b), expected(a, b))
    assert again.cache_info()["disk_hits"] == 1 and entries(cache_dir) == [entry]


PARALLEL_SCRIPT = '''
import torch
import babytriton as bt
from babytriton.runtime import cache

# the key's version part pinned: the next process must look up the entry damaged, even where
# babytriton's own files change between the two (an edit while the test runs)
cache._versions = lambda: (cache.KeyPart("babytriton", "pinned", "pinned"),)

@bt.jit
def parallel_axpy(a: bt.Tensor((512, 512), "float32"), b: bt.Tensor((512, 512), "float32")):
    return a * 3.0 + b   # 2^18 elements: a parallel kernel, so the launcher library is loaded too

a, b = torch.randn(512, 512), torch.randn(512, 512)
torch.testing.assert_close(parallel_axpy(a, b), a * 3.0 + b)
print("disk hits", parallel_axpy.cache_info()["disk_hits"])
'''

# Damage as a crash mid-write or a full disk leaves it: in place (the same inode), or gone.
LIBRARY_DAMAGE = {"truncated": lambda data: data[: len(data) // 3], "zero bytes": lambda data: b"",
                  "garbage": lambda data: b"\x7fELF" + b"\0" * 200, "missing": None}


def test_a_fresh_process_survives_every_damaged_library(tmp_path, cache_dir, monkeypatch):
    """Each cached library (the entry's and the parallel launcher's) truncated, emptied, garbled or
    deleted: a fresh process rebuilds it, returns the right answer and exits 0 (a truncated one
    used to be mapped by dlopen and end the process with SIGBUS)."""
    script = tmp_path / "parallel.py"
    script.write_text(PARALLEL_SCRIPT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))

    def fresh_process(why: str) -> str:   # a fork of a Python with torch and TVM imported, not babytriton
        proc = chapter_zygote.run(script, tmp_path)
        assert proc.returncode == 0, f"{why}: exit code {proc.returncode}\n{proc.stderr[-3000:]}"
        return proc.stdout + proc.stderr

    fresh_process("the first compile")
    libraries = sorted(cache_dir.rglob("*.so"))
    assert {p.parent.name == "native" for p in libraries} == {True, False}, libraries
    for kind, damage in LIBRARY_DAMAGE.items():
        for library in sorted(cache_dir.rglob("*.so")):
            if damage is None:
                library.unlink()
            else:
                library.write_bytes(damage(library.read_bytes()))
        out = fresh_process(f"{kind} libraries")
        assert "disk hits 0" in out and "is corrupt" in out, out
    out = fresh_process("after the repairs")   # what replaced the damage is whole
    assert "disk hits 1" in out and "Warning" not in out, out


# --------------------------------------------------------------------------------------------------
# concurrency
# --------------------------------------------------------------------------------------------------

def test_processes_compiling_the_same_function_at_once_all_succeed(tmp_path, cache_dir):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [run_script(tmp_path, f"p{i}.json", barrier, 2) for i in range(2)]
    results = [finish(p, tmp_path, f"p{i}.json") for i, p in enumerate(procs)]
    for result, err in results:
        assert result["info"]["misses"] == 1 and "Warning" not in err
    assert len({r["digest"] for r, _ in results}) == 1
    # one compiled; the other waited on the entry's lock (cache.entry_lock), then loaded what it stored
    done = sorted((r["info"]["compilations"], r["info"]["disk_hits"], r["from_disk"]) for r, _ in results)
    assert done == [(0, 1, True), (1, 0, False)], done
    assert len(entries(cache_dir)) == 1
    assert not list(cache_dir.glob("*/.tmp-*")) and not list(cache_dir.glob("*/.trash-*"))


def test_a_second_writer_of_an_entry_leaves_the_first_in_place(cache_dir):
    f = bt.jit(cache=False)(add_add)
    k = f.compile()
    key = cache.make_key(f, k.specs, f.target())
    path = cache.entry_dir(f, key)
    assert cache.store(path, key, k.executable, k.stages, k.fusion_record, k.module)
    before = (path / "meta.json").stat().st_mtime_ns
    assert not cache.store(path, key, k.executable, k.stages, k.fusion_record, k.module)
    assert (path / "meta.json").stat().st_mtime_ns == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]   # no temporary folder left
    assert cache.load(path, key).stages == k.stages


def test_folders_left_by_a_dead_writer_are_cleaned_up(cache_dir):
    f = bt.jit(add_add_any)
    f(torch.ones(2), torch.ones(2))
    folder = entries(cache_dir)[0].parent
    old, fresh = folder / ".tmp-0123-99-dead", folder / ".tmp-0123-98-busy"
    old.mkdir()
    fresh.mkdir()
    os.utime(old, (1, 1))
    f(torch.ones(3), torch.ones(3))     # writing the next entry removes what a dead writer left
    assert not old.exists() and fresh.exists()
    assert len(entries(cache_dir)) == 2


def test_threads_calling_one_function_compile_it_once(cache_dir):
    f = bt.jit(add_add)
    barrier = threading.Barrier(6)
    results, errors = [], []

    def call():
        a, b = args23()
        barrier.wait()
        try:
            results.append((f(a, b), expected(a, b)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for out, want in results:
        torch.testing.assert_close(out, want)
    assert f.cache_info()["compilations"] == 1 and f.cache_info()["versions"] == 1


TIR_SCRIPT = '''
import json, sys
import torch
import babytriton as bt

@bt.jit(backend="tir")
def axpy(x: bt.Tensor(("n",), "float32"), y: bt.Tensor(("n",), "float32"), out: bt.Tensor(("n",), "float32"),
         total: bt.Tensor((1,), "float32")):
    for i in range(x.shape[0]):
        out[i] = x[i] * 3.0 + y[i]
        total[0] = total[0] + out[i]

x, y = torch.randn(7), torch.randn(7)
out, total = torch.empty(7), torch.zeros(1)
got = axpy(x, y, out, total)
assert got[0] is out and got[1] is total
torch.testing.assert_close(out, x * 3.0 + y)
torch.testing.assert_close(total, (x * 3.0 + y).sum().reshape(1))
k = axpy.compile(x, y, out, total)
json.dump({"info": axpy.cache_info(), "from_disk": k.from_disk, "stages": k.stages,
           "module": "T.prim_func" in k.module.script()}, open(sys.argv[1], "w"))
'''


def test_a_second_process_loads_a_tir_backend_entry(tmp_path, cache_dir, recwarn, monkeypatch):
    script = tmp_path / "tir.py"
    script.write_text(TIR_SCRIPT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    outs = []
    for name in ("1.json", "2.json"):   # each a fork of a Python with torch and TVM imported, not babytriton
        proc = chapter_zygote.run(script, tmp_path, str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        assert "CacheWarning" not in proc.stderr, proc.stderr
        outs.append(json.loads((tmp_path / name).read_text()))
    assert outs[0]["info"]["compilations"] == 1 and outs[0]["info"]["disk_writes"] == 1
    assert outs[1]["info"]["disk_hits"] == 1 and outs[1]["info"]["compilations"] == 0
    assert outs[1]["from_disk"] and outs[1]["stages"] == outs[0]["stages"] and outs[1]["module"]


# --------------------------------------------------------------------------------------------------
# the key
# --------------------------------------------------------------------------------------------------

SCALE = 2.0


def scaled(x: T23):
    return x * SCALE


def test_a_global_constant_is_part_of_the_key(cache_dir, monkeypatch):
    f = bt.jit(scaled)
    x = torch.randn(2, 3)
    torch.testing.assert_close(f(x), x * 2.0)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    g = bt.jit(scaled)                 # a new process would see the edited constant like this
    explained = g.explain(x)
    assert not explained.on_disk and explained.compared_with == "disk"
    assert explained.differences == ["global `SCALE`: 2.0 → 3.0"]
    torch.testing.assert_close(g(x), x * 3.0)
    assert g.cache_info()["compilations"] == 1
    assert len(entries(cache_dir)) == 2


def test_key_parts_name_sources_globals_arguments_target_and_versions():
    f = bt.jit(scaled)
    key = cache.make_key(f, f._specs((torch.ones(2, 3),)), f.target())
    labels = [p.label for p in key.parts]
    for label in ("source of `scaled`", "global `SCALE`", "dtype of `x`", "shape of `x`", "target",
                  "option `schedule`", "option `unroll`", "babytriton", "tvm", "tvm-ffi", "python"):
        assert label in labels
    assert "option `verbose`" not in labels and "option `cache`" not in labels
    assert key.digest == cache.make_key(f, f._specs((torch.zeros(2, 3),)), f.target()).digest


def test_called_jit_functions_and_tir_kernels_are_keyed_by_their_source():
    def helper_one(x):
        return x + 1

    def helper_two(x):
        return x + 2

    helper = bt.jit(helper_one)

    def caller(x: T23):
        return helper(x)

    f = bt.jit(caller)
    specs = f._specs((torch.ones(2, 3),))
    first = cache.make_key(f, specs, f.target())
    helper = bt.jit(helper_two)  # noqa: F841 - the closure cell now holds another @jit function
    second = cache.make_key(f, specs, f.target())
    assert first.digest != second.digest
    assert any("global `helper`: @jit helper_one" in d and "helper_two" in d
               for d in cache.differences(first.summary(), second.summary()))
    prim_a, prim_b = _prim_func(1.0), _prim_func(2.0)
    assert cache.canonical(prim_a, set())[0] != cache.canonical(prim_b, set())[0]
    assert "T.prim_func" in cache.canonical(prim_a, set())[0]


def _prim_func(alpha: float):
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T
    with IRBuilder() as ib:
        with T.prim_func():
            T.func_name("axpy")
            x = T.arg("X", T.buffer((2, 4), "float32"))
            y = T.arg("Y", T.buffer((2, 4), "float32"))
            with T.grid(2, 4) as (i, j):
                T.buffer_store(y, x[i, j] * tvm.tirx.const(alpha, "float32"), [i, j])
    return ib.get()


class Config:
    def __len__(self):
        return 3


CONFIG = Config()


def uses_an_object(x: T23):
    return x * len(CONFIG)


def test_a_global_without_a_stable_form_skips_the_disk(cache_dir):
    f = bt.jit(uses_an_object)
    x = torch.randn(2, 3)
    torch.testing.assert_close(f(x), x * 3)
    assert entries(cache_dir) == []
    assert "the global `CONFIG` (Config) has no stable text form" in str(f.explain(x))


def test_tensors_in_globals_are_keyed_by_content():
    t1, t2 = torch.zeros(5000), torch.zeros(5000)
    t2[2500] = 1.0  # same repr (elided), different content
    assert repr(t1) == repr(t2)
    assert cache.canonical(t1, set())[0] != cache.canonical(t2, set())[0]


# --------------------------------------------------------------------------------------------------
# GPU targets
# --------------------------------------------------------------------------------------------------

SM90 = {"kind": "cuda", "arch": "sm_90"}


@pytest.mark.skipif(cache.loadable_here(tvm.target.Target(SM90)), reason="this machine can load CUDA modules")
def test_a_cuda_entry_is_written_but_not_loaded_without_a_cuda_runtime(cache_dir, recwarn):
    first = bt.jit(target=SM90)(add_add)
    first.compile()
    assert first.cache_info()["disk_writes"] == 1
    second = bt.jit(target=SM90)(add_add)
    k = second.compile()
    assert second.cache_info()["compilations"] == 1 and "fused_add_add_multiply_kernel" in k.source
    assert "cannot be loaded here" in str(second.explain())
    assert not [w for w in recwarn if issubclass(w.category, cache.CacheWarning)]


@pytest.mark.gpu
def test_gpu_second_process_loads_from_disk(tmp_path, cache_dir):
    script = tmp_path / "gpu.py"
    script.write_text(textwrap.dedent('''
        import json, sys, torch
        import babytriton as bt

        @bt.jit(target="gpu")
        def f(a: bt.Tensor((256, 64), "float32"), b: bt.Tensor((256, 64), "float32")):
            c = a + b
            return c * a

        a, b = torch.randn(256, 64, device="cuda"), torch.randn(256, 64, device="cuda")
        torch.testing.assert_close(f(a, b), (a + b) * a)
        k = f.compile(a, b)
        json.dump({"info": f.cache_info(), "cuda": [list(x.cuda_kernels) for x in k.fusion],
                   "stages": list(k.stages)}, open(sys.argv[1], "w"))
    '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    outs = []
    for name in ("1.json", "2.json"):
        subprocess.run([sys.executable, str(script), str(tmp_path / name)], env=env, check=True, timeout=300)
        outs.append(json.loads((tmp_path / name).read_text()))
    assert outs[0]["info"]["compilations"] == 1
    assert outs[1]["info"]["disk_hits"] == 1 and outs[1]["info"]["compilations"] == 0
    assert outs[1]["stages"] == outs[0]["stages"] and outs[1]["cuda"] == outs[0]["cuda"]
    (kernels,) = outs[1]["cuda"]
    assert len(kernels) == 1 and kernels[0].startswith("fused_add_multiply")


def test_argument_placement_is_part_of_the_disk_key():
    # functions with device blocks compile one version per argument device; the disk must not mix them
    from babytriton.runtime import cache
    from babytriton.frontend.arguments import ArgSpec

    @bt.jit(target="cpu")
    def g(a):
        return a + 1

    on_cpu = (ArgSpec("tensor", shape=(2,), dtype="float32", device="cpu"),)
    on_gpu = (ArgSpec("tensor", shape=(2,), dtype="float32", device="cuda:0"),)
    target = g.target()
    assert cache.make_key(g, on_cpu, target).digest != cache.make_key(g, on_gpu, target).digest
