"""The symbol table: nested frames of name -> value, entered with `with` beside the IRBuilder's frames."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class FlowSlot:
    """Control-flow state the compiler keeps in the frames beside the user's names, so that the two
    paths of a run-time `if` merge it as they merge variables (control.py, loops.py). `kind` is
    "return" (the value the function returns), "break" or "continue" (that exit of `loop` is under
    way), "broke" or "done" (a recursive loop's flags), or "start" (its first index)."""

    kind: str
    loop: object = None      # the loop's ast node; None for "return"

    @property
    def label(self) -> str:
        """Its name in the IR."""
        return {"return": "result", "break": "breaking", "continue": "continuing"}.get(self.kind, self.kind)

    def describe(self) -> str:
        """How messages call it."""
        return "the return value" if self.kind == "return" else self.label


class Scope:
    """Names visible while compiling a function body; the innermost frame wins. Keys are the user's
    names (str) and the compiler's FlowSlots."""

    def __init__(self):
        self.frames: list[dict[str | FlowSlot, object]] = [{}]

    @contextmanager
    def frame(self):
        """A nested frame whose names vanish when the `with` ends; yields the frame's dict."""
        self.frames.append({})
        try:
            yield self.frames[-1]
        finally:
            self.frames.pop()

    def lookup(self, name: str | FlowSlot):
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise KeyError(name)

    def __contains__(self, name: str | FlowSlot) -> bool:
        return any(name in frame for frame in self.frames)

    def assign(self, name: str | FlowSlot, value) -> None:
        self.frames[-1][name] = value

    def names(self) -> set[str]:
        """The user's names."""
        return {name for frame in self.frames for name in frame if isinstance(name, str)}


class Undefined:
    """What a name holds where it is not defined on every path (after a run-time `if` or loop that
    assigns it on some paths only); reading it is an error that says why."""

    def __init__(self, message: str):
        self.message = message
