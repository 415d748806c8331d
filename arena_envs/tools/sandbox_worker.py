"""The process behind :class:`~arena_envs.tools.sandbox.PythonSandboxEnv`: a restricted Python session.

Run as ``python -I -S sandbox_worker.py MEMORY_BYTES MAX_OUTPUT``; it imports nothing of
arena_envs. It first limits itself (address space, no new files or processes, no core
dumps), then reads one JSON request per line on stdin, ``{"code": ...}`` or
``{"reset": true}``, and answers each with one JSON line ``{"output": ...}``.

Code is checked before it runs (:func:`check`): no names or attributes that start with an
underscore (every dunder trick goes through one), none of the attributes that reach
frames or format strings, and ``import`` only of the modules in :data:`MODULES`, which
are given as namespaces of their public functions and constants only (never a module
object, whose attributes lead to ``os``). The builtins are a safe subset: no ``open``,
``eval``, ``exec``, ``compile``, ``getattr``, ``type``, ``globals``, ``__import__`` and the
like. The parent process enforces the time limit by killing this one.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
import traceback
import types

MODULES = ("math", "cmath", "random", "itertools", "functools", "collections", "statistics", "json", "re",
           "heapq", "bisect", "fractions", "decimal", "datetime", "string")
"""The modules code may import."""

# attributes that lead from ordinary objects to frames, code, globals or format-string lookups
BLOCKED_ATTRIBUTES = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame",
    "ag_code", "ag_await", "tb_frame", "tb_next", "f_globals", "f_locals", "f_builtins", "f_back", "f_code",
    "format", "format_map", "mro", "register",
})  # fmt: skip

SAFE_BUILTINS = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict", "dir",
    "divmod", "enumerate", "filter", "float", "frozenset", "hash", "hex", "int", "isinstance", "issubclass",
    "iter", "len", "list", "map", "max", "min", "next", "oct", "ord", "pow", "print", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip", "classmethod", "staticmethod",
    "property", "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError", "KeyError",
    "LookupError", "NameError", "NotImplementedError", "OverflowError", "RecursionError", "RuntimeError",
    "StopIteration", "TypeError", "ValueError", "ZeroDivisionError", "True", "False", "None",
)  # fmt: skip


class SandboxViolation(Exception):
    """Code that uses something the sandbox does not allow."""


def check(source: str) -> ast.Module:
    """Parse ``source`` and refuse what the sandbox does not allow (SandboxViolation, SyntaxError)."""
    tree = ast.parse(source, "<sandbox>", "exec")
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise SandboxViolation(f"line {line}: the name {node.id!r} is not allowed")
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in BLOCKED_ATTRIBUTES):
            raise SandboxViolation(f"line {line}: the attribute {node.attr!r} is not allowed")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name not in MODULES:
                    raise SandboxViolation(f"line {line}: import of {name!r} is not allowed; "
                                           f"allowed modules: {', '.join(MODULES)}")
            if isinstance(node, ast.ImportFrom) and any(alias.name == "*" or alias.name.startswith("_")
                                                        for alias in node.names):
                raise SandboxViolation(f"line {line}: import only public names, one by one")
        if isinstance(node, (ast.Global, ast.Nonlocal)) and any(n.startswith("__") for n in node.names):
            raise SandboxViolation(f"line {line}: that name is not allowed")
        if isinstance(node, ast.ClassDef) and node.keywords:
            raise SandboxViolation(f"line {line}: class keywords (metaclass=...) are not allowed")
    return tree


def _namespace(module: types.ModuleType) -> types.SimpleNamespace:
    """The public functions, classes and constants of ``module``, without its sub-modules
    (``string`` gives its constants only: its ``Formatter`` looks attributes up by name)."""
    return types.SimpleNamespace(**{
        name: value for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
        and (module.__name__ != "string" or isinstance(value, str))})


class _Output:
    """stdout and stderr of the code, kept up to ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        self.limit, self.parts, self.size, self.cut = limit, [], 0, False

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self.size
        if len(text) > room:
            text, self.cut = text[:max(room, 0)], True
        if text:
            self.parts.append(text)
            self.size += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        suffix = f"\n[output truncated to {self.limit} characters]" if self.cut else ""
        return "".join(self.parts) + suffix


class Session:
    """One sandboxed interpreter session: variables persist from one ``run`` to the next."""

    def __init__(self, max_output: int) -> None:
        self.max_output = max_output
        self.reset()

    def reset(self) -> None:
        import random

        modules = {name: _namespace(__import__(name)) for name in MODULES if name != "random"}
        rng = random.Random()
        modules["random"] = types.SimpleNamespace(**{name: getattr(rng, name) for name in dir(rng)
                                                     if not name.startswith("_") and callable(getattr(rng, name))})
        self.modules = modules
        self.output = _Output(self.max_output)
        safe = {name: getattr(builtins, name) for name in SAFE_BUILTINS}
        safe["print"] = self._print
        safe["__import__"] = self._import
        safe["__build_class__"] = builtins.__build_class__  # class statements need it
        self.globals: dict = {"__builtins__": safe, "__name__": "__sandbox__"}

    def _print(self, *args: object, sep: str | None = " ", end: str | None = "\n", **_: object) -> None:
        sep = " " if sep is None else str(sep)
        end = "\n" if end is None else str(end)
        self.output.write(sep.join(map(str, args)) + end)

    def _import(self, name: str, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        if level or name not in self.modules:
            raise ImportError(f"import of {name!r} is not allowed")
        return self.modules[name]

    def run(self, source: str) -> str:
        self.output = _Output(self.max_output)
        try:
            code = compile(check(source), "<sandbox>", "exec")
            exec(code, self.globals)  # noqa: S102 - checked above, restricted builtins
        except SandboxViolation as error:
            self.output.write(f"SandboxViolation: {error}\n")
        except BaseException as error:  # the code's own error, reported like Python does
            self.output.write(_traceback(error))
        return self.output.text()


def _traceback(error: BaseException) -> str:
    """The traceback of an error in the code, its own frames only."""
    lines: list[str] = []
    repeats = 0
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename != "<sandbox>":
            continue
        line = f"  line {frame.lineno}\n"
        if lines and lines[-1] == line:
            repeats += 1
            continue
        if repeats:
            lines.append(f"  [previous line repeated {repeats} more times]\n")
            repeats = 0
        lines.append(line)
    if repeats:
        lines.append(f"  [previous line repeated {repeats} more times]\n")
    head = ["Traceback (most recent call last):\n", *lines] if lines else []
    return "".join(head + traceback.format_exception_only(type(error), error))


def _limit(memory: int) -> None:
    import resource

    # CPU: a backstop for a process whose parent died while its code spun (the parent's
    # per-call time limit kills it long before)
    for limit, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_FSIZE, 0), (resource.RLIMIT_CORE, 0),
                         (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_CPU, 3600)):
        try:
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass  # a limit this system does not have (or already lower)


def main() -> None:
    memory, max_output = int(sys.argv[1]), int(sys.argv[2])
    stdin, stdout = sys.stdin, sys.__stdout__
    session = Session(max_output)  # imports the allowed modules before the limits
    _limit(memory)
    sys.stdout = sys.stderr = session.output  # stray writes go nowhere the parent reads
    sys.setrecursionlimit(400)  # a deep recursion is a RecursionError well before the C stack ends
    for line in stdin:
        try:
            request = json.loads(line)
            if request.get("reset"):
                session.reset()
                output = ""
            else:
                output = session.run(str(request["code"]))
            sys.stdout = sys.stderr = session.output
            reply = json.dumps({"output": output})
        except MemoryError:
            session.globals.clear()  # whatever filled memory goes, or no reply could be built
            reply = json.dumps({"output": "MemoryError: the code used more memory than allowed\n"})
        stdout.write(reply + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()
