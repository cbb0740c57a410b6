"""The symbol table: nested frames of name -> value, entered with `with` beside the IRBuilder's frames."""
from __future__ import annotations

from contextlib import contextmanager


class Scope:
    """Names visible while compiling a function body; the innermost frame wins."""

    def __init__(self):
        self.frames: list[dict] = [{}]

    @contextmanager
    def frame(self):
        """A nested frame whose names vanish when the `with` ends; yields the frame's dict."""
        self.frames.append({})
        try:
            yield self.frames[-1]
        finally:
            self.frames.pop()

    def lookup(self, name: str):
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return any(name in frame for frame in self.frames)

    def assign(self, name: str, value) -> None:
        self.frames[-1][name] = value

    def names(self) -> set[str]:
        return set().union(*self.frames)


class Undefined:
    """What a name holds where it is not defined on every path (after a run-time `if` or loop that
    assigns it on some paths only); reading it is an error that says why."""

    def __init__(self, message: str):
        self.message = message
