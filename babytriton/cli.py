"""`python -m babytriton`: what users do from a shell. `show` a function's fusion map, stages or
generated source, `explain` why a second call compiles again, look at or `clear` the `cache`, and
build (and serve) the `book`. Mistakes in the command line exit with 2 and one line on stderr; a
function that does not compile prints its CompilationError and exits with 1."""
from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib.util
import inspect
import os
import re
import shutil
import sys
import traceback
import types
from pathlib import Path

import torch
import tvm

from .core import config, targets
from .core.errors import CompilationError, debug_enabled
from .core.types import DTYPES
from .frontend.function import Decorated
from .jit import jit
from .runtime import cache

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"   # in a clone of the repository, not in a wheel
BOOK_ADDRESS = "http://127.0.0.1:{port}/"               # where scripts/build_book.py's serve() serves it


_MISSING = object()


class UsageError(Exception):
    """A mistake in the command line: printed as one line, exit status 2."""


# --------------------------------------------------------------------------------------------------
# file.py:function and its example arguments
# --------------------------------------------------------------------------------------------------

def load_function(spec: str, target: str | None):
    """The @jit function `file.py:function` names (a plain function is wrapped in @jit), for `target`
    when one is given (else its own)."""
    path_text, _, name = spec.rpartition(":")
    if not path_text or not name.isidentifier():
        raise UsageError(f"'{spec}' is not FILE.py:FUNCTION (e.g. examples/add.py:add)")
    module = _import_file(Path(path_text))
    value = vars(module).get(name, _MISSING)
    if value is _MISSING:
        found = [n for n, v in vars(module).items() if _defined_in(v, module)]
        hint = difflib.get_close_matches(name, found, n=1)
        raise UsageError(f"{path_text} defines no '{name}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
                         + (f" (its functions: {', '.join(found)})" if found else ""))
    if _triton_kernel(value) is not None:   # compiled for `target` by show (the tensors' device is meta)
        return _triton_kernel(value)
    if isinstance(value, Decorated):
        options = {} if target is None else {"target": parse_target(target)}
        return jit(value.fn, **{**value.options, **options}) if options else value
    if isinstance(value, types.FunctionType):
        return jit(value, target=parse_target(target or "cpu"))
    raise UsageError(f"'{name}' in {path_text} is not a function (its type is {type(value).__name__})")


def _triton_kernel(value):
    """The @triton.jit function `value` is, or wraps (an autotune, heuristics), else None."""
    while value is not None and not getattr(value, "__triton_jit__", False):
        value = getattr(value, "fn", None) if not isinstance(value, types.FunctionType) else None
    return value


def _defined_in(value, module: types.ModuleType) -> bool:
    """Whether `value` is a function (@jit or plain) that the file itself defines, not one it imports."""
    fn = value.fn if isinstance(value, Decorated) else value
    return isinstance(fn, types.FunctionType) and fn.__module__ == module.__name__


def _import_file(path: Path) -> types.ModuleType:
    """Run a Python file as a module (its folder on sys.path while it imports, as `python file.py`)."""
    if not path.is_file():
        raise UsageError(f"no file {path}" if not path.exists() else f"{path} is not a file")
    name = path.stem if path.stem.isidentifier() and path.stem not in sys.modules else f"_babytriton_cli_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)   # as given: messages name it so
    if spec is None or spec.loader is None:
        raise UsageError(f"{path} is not a Python file (its name must end in .py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses and pickling look a module up by name
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        with contextlib.redirect_stdout(sys.stderr):   # what it prints is not what was asked for
            spec.loader.exec_module(module)
    except CompilationError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the user's file raises while it imports
        sys.modules.pop(name, None)
        raise UsageError(_import_error(e, path)) from None
    finally:
        sys.path.remove(folder)
    return module


def _import_error(error: Exception, path: Path) -> str:
    """One line for an exception a file raised while it imported, at its line in the file."""
    if isinstance(error, SyntaxError):
        return f"{path}:{error.lineno}: {error.msg}"
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    message = f": {str(error).strip().splitlines()[0]}" if str(error).strip() else ""
    return (f"importing {path}{f':{lines[-1]}' if lines else ''} raised {type(error).__name__}{message} "
            "(keep what a script runs under `if __name__ == \"__main__\":`)")


def parse_target(text: str | None):
    """`cpu`, `gpu` (their aliases), `sm_90` (CUDA for that architecture, no GPU needed) or a TVM
    target string such as `llvm -mcpu=haswell`."""
    if text is None or text in targets.TARGET_ALIASES:
        return text
    if re.fullmatch(r"sm_\d+a?", text):
        return tvm.target.Target({"kind": "cuda", "arch": text})
    try:
        target = tvm.target.Target(text)
        targets.check_target(target)
    except Exception as e:  # noqa: BLE001 - TVM's parser raises its own error types
        raise UsageError(f"unknown target '{text}' ({_first_line(e)}); use cpu, gpu, sm_90 (any sm_NN) "
                         "or a TVM target string") from None
    return target


def parse_arguments(texts: list[str], function, option: str) -> tuple:
    """Example arguments from their text: `4,8` an empty float32 tensor of that shape (`4,8:float16`
    another dtype, `` or `()` 0-d), `=LITERAL` a Python value (bare for int, float, bool and constexpr
    parameters). Tensors live on torch's meta device: compiling needs their shapes, never their data.
    Where a function has device blocks, its tensors are (empty) CPU tensors: where each is is in the key."""
    params = function.params
    required = [p for p in params if p.default is inspect.Parameter.empty]
    if not texts:   # compile() for the annotations alone, where they say every shape
        return ()
    if not len(required) <= len(texts) <= len(params):
        count = f"{len(required)}" if len(required) == len(params) else f"{len(required)} to {len(params)}"
        raise UsageError(f"{function.__name__}({', '.join(p.name for p in params)}) takes {count} argument(s); "
                         f"{option} gave {len(texts)}")
    # a function with device blocks keys its versions on where each tensor is: real (empty) CPU tensors
    device = "cpu" if function.info.heterogeneous else "meta"
    return tuple(parse_argument(text, param.kind, option, device) for text, param in zip(texts, params))


def parse_argument(text: str, kind: str, option: str, device: str = "meta"):
    """One example argument (see parse_arguments): an empty tensor on `device`, or a Python value."""
    text = text.strip()
    if text.startswith("=") or kind in ("scalar", "constexpr"):
        try:
            return ast.literal_eval(text.removeprefix("="))
        except (ValueError, SyntaxError):
            raise UsageError(f"{option} '{text}' is not a Python value (e.g. =3, =0.5, =True, =None)") from None
    shape_text, _, dtype_name = text.partition(":")
    dtype = DTYPES.get(dtype_name.strip() or "float32")
    if dtype is None:
        raise UsageError(f"{option} '{text}': unknown dtype '{dtype_name}'; use one of {', '.join(DTYPES)}")
    sizes = [s.strip() for s in shape_text.strip().strip("()[]").split(",")]
    if sizes[-1] == "":   # `4,` or the empty shape
        sizes.pop()
    if not all(s.isdigit() for s in sizes):
        raise UsageError(f"{option} '{text}' is not a shape: sizes separated by commas with an optional dtype, "
                         "e.g. 4,8 or 4,8:float16 (=VALUE for a Python value)")
    return torch.empty([int(s) for s in sizes], dtype=dtype, device=device)


def example_call(function, texts: list[str], option: str) -> tuple[tuple, tuple]:
    """The example arguments and their specs, checked against the function's annotations (a mismatch
    is the command line's); no arguments: the annotations alone."""
    args = parse_arguments(texts, function, option)
    try:
        specs = function.info.specs(function.info.bind(args, {})) if args else function.info.static_specs()
    except (TypeError, ValueError) as e:
        message = _first_line(e) if args else f"{option} needed: {_first_line(e).split(';')[0]}"
        raise UsageError(message) from None
    return args, specs


def signature(function, specs: tuple) -> str:
    """`f(a: float32[4, 8], n: int64, k=3)`: a call as the compiler sees it, for headings."""
    shown = []
    for param, spec in zip(function.params, specs):
        if spec.kind == "tensor":
            shown.append(f"{param.name}: {spec.dtype}[{', '.join(map(str, spec.shape))}]")
        elif spec.kind == "scalar":
            shown.append(f"{param.name}: {spec.dtype}")
        else:
            shown.append(f"{param.name}={spec.value!r}")
    return f"{function.__name__}({', '.join(shown)})"


# --------------------------------------------------------------------------------------------------
# the subcommands
# --------------------------------------------------------------------------------------------------

def show(options) -> int:
    """Compile the function for the example arguments; print its fusion map and stage names, one
    stage, or the generated source."""
    function = load_function(options.function, options.target)
    if _triton_kernel(function) is not None:
        return show_triton(function, options)
    args, specs = example_call(function, options.args, "--args")
    kernel = function.compile(*args)
    if options.source:
        print(kernel.source)
    elif options.stage is not None:
        print(kernel.stages[_stage_name(options.stage, kernel.stages)])
    else:
        print(f"{signature(function, specs)} for {cache._short_target(kernel.target)}\n")
        print(kernel.fusion if kernel.backend != "tir" else "backend='tir': one kernel, as written (nothing fuses)")
        print(f"\nstages: {', '.join(kernel.stages)}\n(--stage NAME prints one; --source the generated code)")
    return 0


def show_triton(kernel, options) -> int:
    """`show` for a @triton.jit kernel: compiled (kernel.warmup) for the example arguments, pointer
    arguments given as tensor specs, other run-time arguments as =VALUE, constexprs bare."""
    names = kernel.arg_names
    required = [n for n, p in kernel.signature.parameters.items() if p.default is inspect.Parameter.empty]
    if not len(required) <= len(options.args) <= len(names):
        count = f"{len(required)}" if len(required) == len(names) else f"{len(required)} to {len(names)}"
        raise UsageError(f"{kernel.__name__}({', '.join(names)}) takes {count} argument(s); "
                         f"--args gave {len(options.args)}")
    args = [parse_argument(text, "constexpr" if name in kernel.constexprs else "tensor", "--args")
            for text, name in zip(options.args, names)]
    target = targets.resolve_target(parse_target(options.target) or "cpu")
    compiled = kernel.warmup(*args, target=target)
    if options.source:
        print(compiled.source)
    elif options.stage is not None:
        print(compiled.stages[_stage_name(options.stage, compiled.stages)])
    else:
        shown = [f"{n}: {_shown_argument(a)}" for n, a in zip(names, args)]
        summary = str(compiled).rsplit("\n", 1)[0]   # its last line names the attributes, not the options
        print(f"{kernel.__name__}({', '.join(shown)}) for {cache._short_target(target)}\n\n{summary}")
        print("(--stage NAME prints one; --source the generated code)")
    return 0


def _shown_argument(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"*{str(value.dtype).removeprefix('torch.')}[{', '.join(map(str, value.shape))}]"
    return repr(value)


def _stage_name(name: str, stages: dict) -> str:
    if name in stages:
        return name
    hint = difflib.get_close_matches(name, stages, n=1)
    raise UsageError(f"no stage '{name}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
                     + f" (stages: {', '.join(stages)})")


def explain(options) -> int:
    """Compile for the first call's arguments, then explain what the second call would do: find that
    version, or compile another, and which parts of the cache key differ."""
    function = load_function(options.function, options.target)
    first, first_specs = example_call(function, options.args, "--args")
    then, then_specs = example_call(function, options.then, "--then")
    kernel = function.compile(*first)
    how = "loaded from the disk cache" if kernel.from_disk else "compiled"
    print(f"first call {signature(function, first_specs)}: {how}, cache key {kernel.cache_key.digest}")
    print(f"then {signature(function, then_specs)}:\n")
    result = function.explain(*then)   # prints its own table
    verdict = ("the second call runs the first call's version: nothing recompiles" if result.in_memory
               else f"the second call compiles again: {len(result.differences)} part(s) of the key differ")
    print(f"\n{verdict}")
    return 0


def show_cache(options) -> int:
    """Where the disk cache is, whether it is on, and what it holds."""
    root = config.cache_dir()
    entries, tuning = cache.entries(root), root / "meta_schedule"
    functions = {entry.parent for entry in entries}
    state = "on" if config.disk_enabled(True) else "off (BABYTRITON_CACHE=0: nothing is read or written)"
    print(f"cache {root}: {state}")
    print(f"  compiled versions: {len(entries)} of {len(functions)} function(s), {_size(sum(map(_bytes, entries)))}")
    print(f"  tuning records:    {_size(_bytes(tuning))} ({tuning.name}/)")
    print("(`python -m babytriton cache clear` removes the compiled versions; BABYTRITON_CACHE_DIR moves it)")
    return 0


def clear_cache(options) -> int:
    """Remove the compiled versions (and, with --tuning, the MetaSchedule records): nothing else that
    lives in the folder, so a cache pointed at a shared folder loses only what babytriton wrote."""
    root = config.cache_dir()
    entries = cache.entries(root)
    removed = entries + [p for folder in root.glob("*") if folder.is_dir()
                         for p in cache.leftovers(folder) + cache.locks(folder)]
    tuning = options.tuning and (root / "meta_schedule").is_dir()
    removed += [root / "meta_schedule"] if tuning else []
    freed = sum(map(_bytes, removed))
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:   # a lock file
            path.unlink(missing_ok=True)
    for folder in {path.parent for path in removed} - {root}:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    also = " and the tuning records" if tuning else ""
    print(f"removed {len(entries)} compiled version(s){also} ({_size(freed)}) from {root}")
    return 0


def _bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _size(count: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def book(options) -> int:
    """Build the book with scripts/build_book.py, then serve it on localhost until Ctrl-C (the one step
    from a clone to reading it; build_book.serve prints the address once the port is bound)."""
    build_book = _script("build_book")
    try:
        site = build_book.build()
    except getattr(build_book, "BookError", ()) as e:   # a chapter or notebook that timed out, named
        raise UsageError(str(e)) from None
    print(f"built {Path(site) / 'index.html'}")
    if options.no_serve:
        return 0
    try:
        build_book.serve(site, options.port)
    except SystemExit as e:   # serve's own one-line reason (the port is taken)
        if isinstance(e.code, str):
            raise UsageError(e.code) from None
        raise
    return 0


def _script(name: str) -> types.ModuleType:
    """A module of the repository's scripts/ folder, which is beside the package in a clone only (it
    imports its neighbours by name, so the folder goes on sys.path)."""
    path = SCRIPTS / f"{name}.py"
    if not path.is_file():
        raise UsageError(f"the book is built from a clone of the repository: {path} is not here "
                         "(an installed babytriton has no scripts/); run this in a clone")
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise UsageError(f"the book needs {e.name or 'its tools'}: pip install -e '.[book]'") from None
    return module


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"'{text}' is not a port (1-65535)")
    return int(text)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --------------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------------

def _function_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("function", metavar="FILE.py:FUNCTION",
                        help="a @jit function (or a plain one, compiled as @jit would) in a Python file")
    parser.add_argument("--target", help="cpu, gpu, sm_90 (any sm_NN: CUDA code without a GPU) or a TVM target "
                                         "string; default: the function's own")


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    _function_arguments(parser)
    parser.add_argument("--args", nargs="*", default=[], metavar="ARG",
                        help="one example per parameter: a shape 4,8 (float32), 4,8:float16, '' for 0-d, "
                             "or =VALUE for a Python value (bare for int/float/bool/constexpr parameters)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--stage", metavar="NAME", help="print this stage's IR (the default lists their names)")
    which.add_argument("--source", action="store_true", help="print the generated CUDA C or LLVM IR")


def _explain_arguments(parser: argparse.ArgumentParser) -> None:
    _function_arguments(parser)
    parser.add_argument("--args", nargs="*", default=[], metavar="ARG", required=True,
                        help="the first call's examples, as for show")
    parser.add_argument("--then", nargs="*", default=[], metavar="ARG", required=True,
                        help="the second call's examples")


def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=sorted(a for a in CACHE_ACTIONS if a), metavar="clear",
                        help="remove the compiled versions (without it: show the cache)")
    parser.add_argument("--tuning", action="store_true", help="with clear: also remove MetaSchedule's tuning records")


def cache_command(options) -> int:
    """Show the disk cache, or clear it."""
    return CACHE_ACTIONS[options.action](options)


CACHE_ACTIONS = {None: show_cache, "clear": clear_cache}


def _book_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-serve", action="store_true", help="only build it (build/book/site)")
    parser.add_argument("--port", type=_port, default=8000,
                        help=f"the port it is served on (default 8000: {BOOK_ADDRESS.format(port=8000)})")


# name -> (what it does, its arguments, what runs it)
COMMANDS = {
    "show": ("compile a function for example arguments and show its kernels, a stage or its source",
             _show_arguments, show),
    "explain": ("explain why a second call compiles again: what changed in the cache key",
                _explain_arguments, explain),
    "cache": ("where the disk cache is and what it holds; `cache clear` empties it", _cache_arguments,
              cache_command),
    "book": ("build the book (scripts/build_book.py) and serve it on localhost",
             _book_arguments, book),
}


def _summary(function) -> str:
    return inspect.getdoc(function).split("\n\n")[0]


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(prog="python -m babytriton", description=__doc__.split("\n\n")[0])
    commands = main_parser.add_subparsers(title="commands", dest="command", required=True)
    for name, (summary, add_arguments, run) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=_summary(run))
        add_arguments(sub)
        sub.set_defaults(run=run)
    return main_parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; the exit status: 0 done, 1 the function does not compile, 2 a bad command line."""
    options = parser().parse_args(argv)
    prog = f"python -m babytriton {options.command}"
    try:
        return options.run(options)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except CompilationError as e:
        print(e, file=sys.stderr)
        return 1
    except BrokenPipeError:   # `| head` stopped reading: no more output, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # noqa: BLE001 - a failure inside the compiler: one line, the traceback on request
        if debug_enabled():
            raise
        print(f"{prog}: {type(e).__name__}: {_first_line(e)} (BABYTRITON_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1
