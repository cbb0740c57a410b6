"""Runs chapters for the tests as `python chapters/NN_x.py` runs them, without paying for torch's and TVM's
imports each time: a Python that has imported them (and nothing of the chapters) forks a child per chapter,
and the child runs the file as `__main__` with the run's directory, argv, sys.path[0], environment and
streams, then exits as a script's interpreter does (atexit, finalisers: what they print is kept).

Each chapter costs about 4 s of CPU for those imports alone, and a test session runs about 55 chapters
(chapters/ and chapters/whole/). tests/conftest.py puts `run` in place of scripts/build_book.py's
`_run_chapter`; the zygote starts with the first chapter a test process runs. The examples' runs and the
disk cache's fresh-process tests use it too (babytriton is not imported in the zygote: each child imports
it afresh), and so do the plain executor's notebooks (`run_python`, scripts/store_executions.py's
`_run_python`); tests that need an interpreter's own start
(hash seeds, processes at once) keep subprocesses.

Run as a script, this file is the zygote: one request per line on stdin (JSON: path, cwd, env, timeout,
stdout and stderr files), one reply per line on stdout (the child's exit status, or that it timed out).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PRELOADED = ("torch", "numpy", "tvm", "tvm.relax", "tvm.script", "tvm.script.ir_builder", "tvm.s_tir.dlight",
             "tvm.support.nvcc")   # what the chapters import, the expensive part of their start


def _child(request: dict, imported_stderr: str):
    """In the forked child: become `python <path>` run in `cwd`, then exit as its interpreter would."""
    import runpy
    import traceback
    os.setpgid(0, 0)    # a timeout stops the chapter and whatever it started (MetaSchedule's workers)
    for fd, name, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY),
                            (2, request["stderr"], os.O_WRONLY)):
        opened = os.open(name, flags)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stderr.write(imported_stderr)  # what those imports printed, as a fresh interpreter prints it
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    path = os.path.abspath(request["path"])
    sys.argv = [request["path"], *request.get("args", ())]
    sys.path[0] = os.path.dirname(path)
    extra = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[1:1] = [entry for entry in extra if entry not in sys.path]   # as the interpreter's start reads it
    code = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    except BaseException:   # noqa: B036 - as the interpreter reports an uncaught exception, status 1
        traceback.print_exc()
        code = 1
    sys.exit(code)


def _wait(pid: int, timeout: float) -> dict:
    """The child's exit status as subprocess reports it (negative: a signal), or a timeout (group killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            os.killpg(pid, 9)
            os.waitpid(pid, 0)
            return {"timeout": True}
        time.sleep(0.02)


def serve():
    """The zygote's loop: import, then fork one child per request."""
    with tempfile.TemporaryFile("w+") as caught:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)
        for name in PRELOADED:
            __import__(name)
        sys.stderr.flush()
        os.dup2(saved, 2)
        caught.seek(0)
        imported_stderr = caught.read()
    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        replies.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, imported_stderr)
        replies.write(json.dumps(_wait(pid, request["timeout"])) + "\n")
        replies.flush()


# --------------------------------------------------------------------------------------------------
# the test process's side
# --------------------------------------------------------------------------------------------------

_zygote: dict = {}
_lock = threading.Lock()


def _started() -> subprocess.Popen:
    if "process" not in _zygote or _zygote["process"].poll() is not None:
        _zygote["process"] = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, text=True, bufsize=1)
    return _zygote["process"]


def _request(script: str, arguments: tuple, cwd: Path, env: dict, timeout: float) -> tuple[dict, str, str]:
    """`python script arguments...` in `cwd` with `env`, run by a fork of the zygote: its reply (the exit
    status, or that it timed out), stdout and stderr."""
    with _lock, tempfile.TemporaryDirectory(prefix="babytriton-chapter-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        out.touch()
        err.touch()
        zygote = _started()
        zygote.stdin.write(json.dumps({"path": script, "args": arguments, "cwd": str(cwd), "env": env,
                                       "timeout": timeout, "stdout": str(out), "stderr": str(err)}) + "\n")
        zygote.stdin.flush()
        reply = zygote.stdout.readline()
        if not reply:
            raise RuntimeError(f"the chapter zygote (tests/chapter_zygote.py) died running {script}")
        return json.loads(reply), out.read_text(), err.read_text()


def run(path: Path, cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    """scripts/build_book.py's `_run_chapter` (`python path arguments...` in `cwd`), run by a fork of the
    zygote: its result (args, returncode, stdout, stderr, `.seconds`), or build_book's timeout error after
    CHAPTER_TIMEOUT."""
    import build_book
    args = [sys.executable, str(path.relative_to(cwd)), *arguments]
    start = time.perf_counter()
    reply, out, err = _request(args[1], arguments, cwd, dict(os.environ), build_book.CHAPTER_TIMEOUT)
    if reply.get("timeout"):
        raise build_book.timed_out(path, build_book.CHAPTER_TIMEOUT)
    result = subprocess.CompletedProcess(args, reply["returncode"], out, err)
    result.seconds = time.perf_counter() - start
    return result


def run_python(argv: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """scripts/store_executions.py's `_run_python` (`python argv...` with `env`, as subprocess.run with
    capture_output, text and timeout), run by a fork of the zygote: the plain executor's notebooks."""
    reply, out, err = _request(str(argv[0]), tuple(map(str, argv[1:])), Path.cwd(), dict(env), timeout)
    if reply.get("timeout"):
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, out, err)
    return subprocess.CompletedProcess([sys.executable, *argv], reply["returncode"], out, err)


def stop():
    process = _zygote.pop("process", None)
    if process and process.poll() is None:
        process.stdin.close()
        process.wait(timeout=30)


if __name__ == "__main__":
    serve()
