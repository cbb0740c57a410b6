"""Stage dumps: BABYTRITON_DUMP_DIR writes numbered stage files per function and key; BABYTRITON_DUMP=1
prints them; versions loaded from the disk cache are dumped too."""
import pytest
import torch

import babytriton as bt

T23 = bt.Tensor((2, 3), "float32")


def expected_files(k) -> list[str]:
    """One file per stage, numbered in pipeline order: text stages by what they hold, IR as .py."""
    suffix = {"python": ".py", "ast": ".txt", "source": ".cu" if k.target.kind.name == "cuda" else ".ll"}
    return [f"{i:02d}_{stage}{suffix.get(stage, '.py')}" for i, stage in enumerate(k.stages)]


def add_add(a: T23, b: T23):
    c = a + b
    d = c + a
    return d


@pytest.fixture
def dump_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BABYTRITON_DUMP_DIR", str(tmp_path / "dump"))
    return tmp_path / "dump"


def version_dirs(root):
    return sorted(p for p in root.glob("*/*") if p.is_dir())


def test_every_stage_is_a_numbered_file_in_a_folder_per_function_and_key(dump_dir):
    k = bt.jit(add_add).compile()
    (folder,) = version_dirs(dump_dir)
    assert folder.parent.name == "add_add"
    assert folder.name.startswith("a_float32_2x3__b_float32_2x3-") and k.cache_key.digest[:8] in folder.name
    files = sorted(p.name for p in folder.iterdir())
    names = expected_files(k)
    assert names[:4] == ["00_python.py", "01_ast.txt", "02_relax.py", "03_ConvertToDataflow.py"]
    assert names[-1].endswith("_source.ll") and "FuseTIR" in " ".join(names)
    assert files == sorted(names + ["fusion.txt", "key.txt"])
    for name, stage in zip(names, k.stages):
        assert (folder / name).read_text() == k.stages[stage]
    assert "fused_add_add" in (folder / "fusion.txt").read_text()
    assert "dtype of `a`" in (folder / "key.txt").read_text()


def test_each_version_gets_its_own_folder(dump_dir):
    @bt.jit
    def neg(x):
        return -x

    neg(torch.ones(2))
    neg(torch.ones(2, 2, dtype=torch.float64))
    neg(torch.ones(2, dtype=torch.int32))
    names = [p.name.rsplit("-", 1)[0] for p in version_dirs(dump_dir)]
    assert sorted(names) == ["x_float32_2", "x_float64_2x2", "x_int32_2"]


def test_a_version_loaded_from_disk_is_dumped_too(dump_dir):
    bt.jit(add_add).compile()
    (folder,) = version_dirs(dump_dir)
    for path in folder.iterdir():
        path.unlink()
    k = bt.jit(add_add).compile()
    assert k.from_disk
    assert sorted(p.name for p in folder.iterdir()) == sorted(expected_files(k) + ["fusion.txt", "key.txt"])
    assert (folder / expected_files(k)[-1]).read_text() == k.source


def test_gpu_stages_include_the_schedule_and_cuda_source(dump_dir):
    k = bt.jit(target={"kind": "cuda", "arch": "sm_90"})(add_add).compile()
    (folder,) = version_dirs(dump_dir)
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(expected_files(k) + ["fusion.txt", "key.txt"])
    schedule, source = expected_files(k)[-2:]
    assert schedule.endswith("_schedule.py") and source.endswith("_source.cu")
    assert (folder / source).read_text() == k.source and "__global__" in k.source


def test_dump_env_prints_the_stages_on_compile_and_on_a_disk_hit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("BABYTRITON_DUMP", "1")
    for _ in range(2):   # compiled, then loaded from disk by a fresh JITFunction
        bt.jit(add_add).compile()
        out = capsys.readouterr().out
        for stage in ("python", "ast", "relax", "FuseTIR", "source"):
            assert f"===== add_add: {stage} =====" in out


def test_no_dump_without_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    bt.jit(add_add).compile()
    assert capsys.readouterr().out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
