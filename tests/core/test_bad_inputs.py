"""The bad-input corpus: each program in tests/core/bad_inputs/ must fail with the error type, line and
words its file states, with a message free of babytriton's and TVM's internals. Nothing may crash
or hang.

A file states its expectations inline:
    # expect: <ErrorType>        (first line) the exception raised: CompilationError, TypeError, ...
    # names: <text>              (optional) text the message must hold, e.g. the parameter's name
    <offending line>  # error: <words>
The offending line is the one the CompilationError points at or, for an error raised by a call
(a wrong argument) or by the decorator (a wrong option), the line of that call in the file; the
message must contain <words>.

The files run in one subprocess (this module, run as a script), each under its own time limit and
with its C-level stderr captured: a crash (a segfault) or a hang fails the tests of every file it
left unrun, and anything the run printed on stderr must be free of internals too.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "bad_inputs"
FILES = sorted(CORPUS.glob("*.py"))
SECONDS_PER_FILE = 60
# Words that belong to babytriton's or TVM's insides, never to a message for a learner.
INTERNALS = ("tvm", "TVM", "Traceback", ".cc", "babytriton/", "InternalError", "relax.", "tirx", "ffi",
             "Check failed", "ir.Op", "T.int64", "R.Tensor")


# ----------------------------------------------------------------------------------------------
# the subprocess: run each file, record what it raised
# ----------------------------------------------------------------------------------------------
class Hang(Exception):
    pass


def _run_one(path: Path) -> dict:
    import runpy
    import signal
    import traceback

    def timeout(*_):
        raise Hang(f"still running after {SECONDS_PER_FILE}s")

    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        signal.signal(signal.SIGALRM, timeout)
        signal.alarm(SECONDS_PER_FILE)
        result = {"file": path.name, "raised": None}
        try:
            runpy.run_path(str(path), run_name=f"bad_input_{path.stem}")
        except BaseException as e:  # noqa: BLE001 - recording what each program raises is the point
            frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
            result.update(raised=type(e).__name__, text=str(e),
                          message=getattr(e, "message", str(e)),
                          lineno=getattr(e, "lineno", None) if hasattr(e, "message") else None,
                          filename=getattr(e, "filename", None),
                          source_line=getattr(e, "source_line", None),
                          call_line=frames[-1].lineno if frames else None)
        finally:
            signal.alarm(0)
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            err.seek(0)
            result["stderr"] = err.read().decode(errors="replace")
    return result


def main(out: str, paths: list[str]) -> None:
    with open(out, "a") as results:
        for path in paths:
            results.write(json.dumps(_run_one(Path(path).resolve())) + "\n")
            results.flush()


# ----------------------------------------------------------------------------------------------
# the tests
# ----------------------------------------------------------------------------------------------
def expectations(path: Path) -> dict:
    lines = path.read_text().splitlines()
    head = re.match(r"# expect: (\w+)", lines[0])
    assert head, f"{path.name}: the first line must be `# expect: <ErrorType>`"
    marked = [(i + 1, m.group(1).strip()) for i, line in enumerate(lines)
              if (m := re.search(r"# error: (.+)$", line))]
    assert len(marked) == 1, f"{path.name}: exactly one line must end with `# error: <words>`"
    names = next((m.group(1).strip() for line in lines[:3] if (m := re.match(r"# names: (.+)$", line))), None)
    return {"type": head.group(1), "line": marked[0][0], "words": marked[0][1], "names": names}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad_inputs") / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")]))
    env.pop("BABYTRITON_DEBUG", None)
    try:
        proc = subprocess.run([sys.executable, __file__, str(out), *map(str, FILES)], env=env,
                              capture_output=True, text=True, timeout=SECONDS_PER_FILE * len(FILES))
        status = proc.returncode
        tail = (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        status, tail = "timeout", ""
    results = {}
    if out.exists():
        for line in out.read_text().splitlines():
            record = json.loads(line)
            results[record["file"]] = record
    return results, status, tail


def test_corpus_size():
    assert len(FILES) >= 50


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_bad_input(path, outcomes):
    results, status, tail = outcomes
    assert path.name in results, f"the run crashed or hung before {path.name} (exit {status}): {tail}"
    got = results[path.name]
    want = expectations(path)
    assert got["raised"] is not None, f"{path.name} ran without an error"
    assert got["raised"] == want["type"], f"raised {got['raised']}: {got['text']}"
    message = got["message"]
    if got["lineno"] is not None:  # a CompilationError points into this file
        assert Path(got["filename"]).resolve() == path.resolve(), got["filename"]
        assert got["lineno"] == want["line"], f"points at line {got['lineno']}, not {want['line']}: {got['text']}"
    else:
        assert got["call_line"] == want["line"], f"raised from line {got['call_line']}, not {want['line']}"
    assert want["words"] in message, f"{want['words']!r} not in {message!r}"
    if want["names"]:
        assert want["names"] in message, f"{want['names']!r} not in {message!r}"
    shown = got["text"].replace(got["source_line"] or "\0", "").replace(str(path), "<file>")
    shown = shown.replace("tvm.target.Target", "<a target object>")  # a public type the option takes
    for word in INTERNALS:
        assert word not in shown, f"{word!r} in the message: {shown}"
        assert word not in got["stderr"], f"{word!r} printed on stderr: {got['stderr']}"


def test_a_failure_inside_compiled_code_is_a_runtime_error_without_internals(tmp_path):
    """The sizes a compiled version relies on are checked before the call, naming the line; a version
    that lost those checks (an old disk cache entry) still fails cleanly when the VM's check trips."""
    import babytriton as bt
    import torch

    path = tmp_path / "program.py"
    path.write_text("import babytriton as bt\n\n\n@bt.jit(cache=False)\n"
                    "def f(x: bt.Tensor((3, 2), 'float32'), y: bt.Tensor(('d',), 'float32')):\n    return x * y\n")
    namespace = runpy_module(path)
    f = namespace["f"]
    kernel = f.compile(torch.ones(3, 2), torch.ones(2))
    kernel.size_checks = ()
    with pytest.raises(RuntimeError) as info:
        kernel(torch.ones(3, 2), torch.ones(3))
    message = str(info.value)
    assert message.startswith("f(): an argument's sizes differ from the sizes this compiled version relies on")
    assert not any(word in message.replace("see TVM's message", "") for word in INTERNALS), message


def runpy_module(path: Path) -> dict:
    import runpy
    return runpy.run_path(str(path))


if __name__ == "__main__":  # the subprocess: python tests/core/test_bad_inputs.py RESULTS FILE...
    main(sys.argv[1], sys.argv[2:])
