"""AgentFly-style tools: functions, methods and classes a model calls with JSON arguments.

Three ways to make one, all with a ``.name``, an OpenAI ``.schema`` derived from the
signature and the Google-style docstring, and ``await t.acall(**arguments)``::

    @tool(name="add", description="Add two numbers.")
    def add(a: int, b: int = 1) -> int: ...

    class Search(BaseTool):
        name = "search"
        description = "Search the notes."
        async def call(self, query: str) -> str: ...

    class Agent(BaseAgent):
        @tool
        async def remember(self, fact: str) -> str: ...   # agent.remember is bound

A stateful tool names an environment class and runs on a pool of its instances, one per
id (see :mod:`arena_envs.tools.resource_pool`)::

    @tool(env_cls=PythonSandboxEnv, name="code_interpreter", stateful=True, pool_size=16)
    async def code_interpreter(code: str, env: PythonSandboxEnv):
        return await env.step(code)

    await code_interpreter("print('Hello World')", id="12345")   # id's own environment
    await code_interpreter.release(id="12345")                    # reset and back to the pool

A name that is not a valid function name (``"tool name"``) becomes one (``"tool_name"``);
the name as written is kept as the tool's ``title``.
"""

from __future__ import annotations

import collections.abc
import copy
import enum
import functools
import inspect
import json
import re
import types
import typing
import unicodedata
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal, Union, overload

from .errors import ToolCallError
from .registry import function_schema

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class BaseTool:
    """A tool: subclass it, set ``name`` and ``description`` and write ``call`` (sync or async).

    A stateful tool sets ``stateful = True`` and ``env_cls`` (an environment class or a
    Gymnasium env id), optionally ``pool_size``, and takes its environment as a ``call``
    parameter named ``env``; that parameter is left out of the schema because the tool
    pool supplies it. It is called with ``id=`` (``await t(..., id="a")``): each id gets
    its own environment from the tool's :attr:`pool` until ``await t.release(id="a")``.
    """

    name: str
    title: str | None = None  # the name as written, when it had to be changed into a valid one
    description: str = ""
    stateful: bool = False
    env_cls: type | str | None = None
    pool_size: int | None = None
    _pool_holder: list[Any] | None = None  # see _pool_box
    _fit: tuple[Callable[..., Any], _DirectFit | None] | None = None  # (call, its fit), see __call__

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "call" in cls.__dict__:
            owner = cls.__qualname__
            name, title = _tool_name(getattr(cls, "name", None), owner)
            if title is not None:
                cls.name, cls.title = name, title
            _check_stateful(cls.stateful, cls.env_cls, cls.pool_size, owner)
            _check_signature(cls.__dict__["call"], True, cls.stateful, owner)

    def _function(self) -> tuple[Callable[..., Any], bool]:
        """The function behind the tool and whether its first parameter is ``self``."""
        return type(self).call, True

    @property
    def schema(self) -> dict[str, Any]:
        """This tool in the OpenAI function-calling format."""
        function, _ = self._function()
        description = self.description or _parse_docstring(function.__doc__).summary
        parameters = copy.deepcopy(self._parameters)
        if self.title is not None:
            parameters = {"title": self.title, **parameters}
        return function_schema(self.name, description, parameters)

    @functools.cached_property
    def _parameters(self) -> dict[str, Any]:
        function, skip_self = self._function()
        return _parameters_schema(function, skip_self, self.stateful, f"tool {self.name!r}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.stateful or "env" in kwargs:
            return self.call(*args, **kwargs)
        # A stateful tool: a coroutine, awaited. The fast path of ``await t(..., id=i)`` first,
        # inline as it runs for every call: the tool's own coroutine, given i's env, when
        # nothing is left to check or wait for. That is when the tool is async, its arguments
        # plainly fit its signature, and its pool lends i's env without a lease because i
        # already holds one (``held_env``: the batched arena pool, whose leases hold nothing).
        # Anything else (a new id, an unhashable one, arguments to report) takes the general
        # path, acall, which raises when awaited as before.
        holder = self._pool_holder
        held_env = getattr(holder[0], "held_env", None) if holder is not None and "id" in kwargs else None
        if held_env is not None:
            call = self.call
            fit = self._fit
            if fit is None or fit[0] is not call:
                bound = type(call) is types.MethodType
                fit = self._fit = (call, _direct_fit(call.__func__ if bound else call, bound))
            fit = fit[1]
            if fit is not None and len(args) < len(fit.after):
                id = kwargs.pop("id")
                given, required = fit.after[len(args)]
                if kwargs:
                    keys = kwargs.keys()
                    fits = (fit.names is None or keys <= fit.names) and keys.isdisjoint(given) and required <= keys
                else:
                    fits = not required
                if fits:
                    try:
                        env = held_env(id)
                    except Exception:  # an id that cannot be looked up: the general path says why
                        env = None
                    if env is not None:
                        kwargs["env"] = env
                        return call(*args, **kwargs)
                kwargs["id"] = id
        return self.acall(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """Run the tool and return its result, awaited if ``call`` is async.

        A stateful tool takes ``id=`` (its environment comes from :attr:`pool`) or ``env=``.
        Arguments that do not fit the signature raise ToolCallError (INVALID_PARAMS);
        errors raised by the tool itself propagate unchanged.
        """
        if self.stateful and "env" not in kwargs:
            if "id" not in kwargs:
                raise ToolCallError(
                    f"{self.name} is a stateful tool: call it with id=... (or pass env=...)", field="id")
            id = kwargs.pop("id")
            return await self._run_in(self.pool, id, args, kwargs)
        self._bind(args, kwargs)
        return await self._invoke(args, kwargs)

    async def _invoke(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = self.call(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Check the arguments against the signature; ToolCallError (INVALID_PARAMS) if they do not fit."""
        call = self.call
        function = getattr(call, "__func__", call)
        shape = _call_shape(function, function is not call)
        if not shape.open_ended:
            # a misspelt argument is named, rather than reported as the missing one it was meant to be
            unknown = [name for name in kwargs if name not in shape.names]
            if unknown:
                known = [name for name in shape.names if not (self.stateful and name == "env")]
                raise ToolCallError(f"{self.name}: unexpected argument {unknown[0]!r}; "
                                    f"the arguments are {', '.join(known) or 'none'}", field=str(unknown[0]))
        given = shape.positional[:len(args)]
        if len(given) == len(args) and not any(name in kwargs for name in given):
            # the usual call, checked without binding (this runs for every call)
            for name in shape.required:
                if name not in kwargs and name not in given:
                    raise ToolCallError(f"{self.name}: missing a required argument: {name!r}")
            return
        try:
            shape.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise ToolCallError(f"{self.name}: {error}") from None

    # -- stateful tools ---------------------------------------------------------------------

    @property
    def pool(self) -> Any:
        """The pool of ``env_cls`` instances a stateful tool runs on, made on first use with
        ``pool_size`` (default 16) instances: a batched ``ToolPool`` for an arena scenario, a
        ``ResourcePool`` otherwise. Assign another pool (``make_pool(...)``) to configure it."""
        if not self.stateful:
            raise TypeError(f"{self.name} is not a stateful tool: it has no pool")
        box = self._pool_box
        if box[0] is None:
            from .pool import make_pool
            from .resource_pool import DEFAULT_POOL_SIZE

            box[0] = make_pool(self.env_cls, self.pool_size or DEFAULT_POOL_SIZE)
        return box[0]

    @pool.setter
    def pool(self, pool: Any) -> None:
        if not self.stateful:
            raise TypeError(f"{self.name} is not a stateful tool: it has no pool")
        self._pool_box[0] = pool

    @property
    def _pool_box(self) -> list[Any]:
        # a one-item list, so the copies a method tool makes when it binds share the pool
        return self.__dict__.setdefault("_pool_holder", [None])

    async def _run_in(self, pool: Any, id: Hashable, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run this stateful tool in ``id``'s environment of ``pool``."""
        self._bind(args, {**kwargs, "env": None})  # bad arguments take no environment
        held_env = getattr(pool, "held_env", None)
        env = None if held_env is None else held_env(id)
        if env is not None:  # the id's env, lent without a lease (see __call__)
            return await self._invoke(args, {**kwargs, "env": env})
        async with pool.lease(id) as env:
            return await self._invoke(args, {**kwargs, "env": env})

    async def release(self, id: Hashable) -> None:
        """Reset ``id``'s environment and give it back to the pool (a no-op for an unknown id)."""
        await self.pool.release(id)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTool(BaseTool):
    """A tool made by ``@tool`` from a function; defined in a class body it binds like a method."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        stateful: bool = False,
        env_cls: type | str | None = None,
        pool_size: int | None = None,
    ) -> None:
        if not inspect.isfunction(func):
            raise TypeError(f"@tool decorates functions, got {func!r}")
        self.func = func
        self.call = func
        self.name, self.title = _tool_name(name if name is not None else func.__name__, func.__qualname__)
        self.description = description if description is not None else _parse_docstring(func.__doc__).summary
        self.stateful, self.env_cls, self.pool_size = stateful, env_cls, pool_size
        self._is_method = _defined_in_class(func)
        self._pool_holder: list[Any] = [None]  # shared by the bound copies of a method tool (see pool)
        _check_stateful(stateful, env_cls, pool_size, func.__qualname__)
        _check_signature(func, self._is_method, stateful, func.__qualname__)
        functools.update_wrapper(self, func)

    def _function(self) -> tuple[Callable[..., Any], bool]:
        return self.func, self._is_method

    def __get__(self, instance: Any, owner: type | None = None) -> FunctionTool:
        if instance is None:
            return self
        bound = copy.copy(self)
        bound.call = types.MethodType(self.func, instance)
        return bound


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    stateful: bool = False,
    env_cls: type | str | None = None,
    pool_size: int | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    stateful: bool = False,
    env_cls: type | str | None = None,
    pool_size: int | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a sync or async function or method, as ``@tool`` or ``@tool(...)``.

    ``name`` defaults to the function's name and ``description`` to its docstring.
    ``stateful``, ``env_cls`` and ``pool_size`` configure a tool that runs on a pool of
    environments (see BaseTool).
    """

    def decorate(function: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            function,
            name=name,
            description=description,
            stateful=stateful,
            env_cls=env_cls,
            pool_size=pool_size,
        )

    return decorate if func is None else decorate(func)


class _CallShape(typing.NamedTuple):
    signature: inspect.Signature
    names: tuple[str, ...]  # parameters an argument can be passed to by name, in order
    positional: tuple[str, ...]  # those that also take a positional argument, in order
    required: tuple[str, ...]  # those without a default
    open_ended: bool  # takes **kwargs


@functools.lru_cache(maxsize=1024)
def _call_shape(function: Callable[..., Any], bound: bool) -> _CallShape:
    """What a call of ``function`` (without its first parameter when ``bound``) accepts."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())[int(bound):]
    signature = signature.replace(parameters=parameters)
    by_name = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return _CallShape(signature, tuple(p.name for p in by_name),
                      tuple(p.name for p in by_name if p.kind is p.POSITIONAL_OR_KEYWORD),
                      tuple(p.name for p in by_name if p.default is p.empty),
                      any(p.kind is p.VAR_KEYWORD for p in parameters))


class _DirectFit(typing.NamedTuple):
    """When a call of a stateful tool's function plainly fits its signature (see ``BaseTool.__call__``)."""

    names: frozenset[str] | None  # the names an argument may be passed by (None: any, it takes **kwargs)
    # for n positional arguments (n < len): the names they fill, and those still to be passed by name
    after: tuple[tuple[frozenset[str], frozenset[str]], ...]


@functools.lru_cache(maxsize=1024)
def _direct_fit(function: Callable[..., Any], bound: bool) -> _DirectFit | None:
    """The fit of an async stateful tool's function (None for a sync one: it has no fast path)."""
    if not inspect.iscoroutinefunction(function):
        return None
    shape = _call_shape(function, bound)
    after = []
    for n in range(len(shape.positional) + 1):
        given = frozenset(shape.positional[:n])
        if "env" in given:  # the env is passed by name: a positional argument may not fill it
            break
        after.append((given, frozenset(shape.required) - given - {"env"}))
    return _DirectFit(None if shape.open_ended else frozenset(shape.names) - {"env"}, tuple(after))


def _defined_in_class(func: Callable[..., Any]) -> bool:
    """Whether ``func`` was written in a class body (its qualname says ``Class.func``)."""
    scope = func.__qualname__.rpartition(".")[0]
    return bool(scope) and not scope.endswith("<locals>")


def _tool_name(name: Any, owner: str) -> tuple[str, str | None]:
    """``(name, title)``: a name that is not a valid function name (1-64 letters, digits,
    ``_`` or ``-``) is made into one, and the name as written becomes the title."""
    if not isinstance(name, str):
        raise ValueError(f"{owner}: tool name must be a string, got {name!r}")
    if _TOOL_NAME.fullmatch(name):
        return name, None
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    fixed = re.sub(r"[^A-Za-z0-9_-]+", "_", ascii_name).strip("_")[:64]
    if not fixed:
        raise ValueError(f"{owner}: tool name must hold a letter or a digit, got {name!r}")
    return fixed, name


def _check_stateful(stateful: bool, env_cls: Any, pool_size: Any, owner: str) -> None:
    if not stateful:
        if env_cls is not None or pool_size is not None:
            raise ValueError(f"{owner}: env_cls and pool_size apply only with stateful=True")
        return
    if not isinstance(env_cls, (type, str)):
        raise ValueError(f"{owner}: a stateful tool needs env_cls, an environment class or env id")
    if pool_size is not None and (isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1):
        raise ValueError(f"{owner}: pool_size must be a positive integer, got {pool_size!r}")


def _check_signature(func: Callable[..., Any], skip_self: bool, stateful: bool, owner: str) -> None:
    parameters = list(inspect.signature(func).parameters.values())[int(skip_self) :]
    for parameter in parameters:
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"{owner}: parameter {parameter.name!r} is positional-only, but tool calls pass arguments by name"
            )
    names = {parameter.name for parameter in parameters}
    if stateful and "env" not in names:
        raise TypeError(f"{owner}: a stateful tool takes its environment as a parameter 'env'")
    if stateful and "id" in names:
        raise TypeError(f"{owner}: 'id' is how a stateful tool is called (it picks the environment); "
                        f"name the parameter otherwise")


# --- JSON Schema from a signature ---------------------------------------------------------


def _parameters_schema(func: Callable[..., Any], skip_self: bool, stateful: bool, owner: str) -> dict[str, Any]:
    docs = _parse_docstring(func.__doc__).args
    properties: dict[str, Any] = {}
    required: list[str] = []
    open_ended = False
    for parameter in list(inspect.signature(func).parameters.values())[int(skip_self) :]:
        if parameter.kind is parameter.VAR_KEYWORD:
            open_ended = True
            continue
        if parameter.kind is parameter.VAR_POSITIONAL or (stateful and parameter.name == "env"):
            continue
        doc_type, doc_text = docs.get(parameter.name, (None, ""))
        try:
            if parameter.annotation is not parameter.empty:
                schema = _type_schema(_resolve(parameter.annotation, func))
            else:
                schema = _type_schema(_docstring_type(doc_type))
        except TypeError as error:
            raise TypeError(f"{owner}, parameter {parameter.name!r}: {error}") from None
        if doc_text:
            schema["description"] = doc_text
        if parameter.default is parameter.empty:
            required.append(parameter.name)
        else:
            try:
                schema["default"] = json.loads(json.dumps(parameter.default, allow_nan=False))
            except (TypeError, ValueError):
                pass  # a default JSON cannot show, such as an arbitrary object
        properties[parameter.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if not open_ended:
        parameters["additionalProperties"] = False
    return parameters


def _resolve(annotation: Any, func: Callable[..., Any]) -> Any:
    """Evaluate one annotation, postponed (a string) or not, in the function's module."""
    holder = types.SimpleNamespace(__annotations__={"hint": annotation})
    try:
        return typing.get_type_hints(holder, globalns=getattr(func, "__globals__", {}))["hint"]
    except Exception as error:  # NameError, SyntaxError, ... from user code
        raise TypeError(f"cannot resolve the type hint {annotation!r}: {error}") from None


_SCALAR_SCHEMAS = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a Python type hint; TypeError for types JSON cannot carry."""
    if hint is Any:
        return {}
    if hint in _SCALAR_SCHEMAS:
        return {"type": _SCALAR_SCHEMAS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        members = [_type_schema(arg) for arg in args]
        if all(list(member) == ["type"] for member in members):
            return {"type": [member["type"] for member in members]}
        return {"anyOf": members}
    if origin is Literal:
        return _enum_schema(list(args))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint])
    if origin is tuple and args and args[-1] is not Ellipsis:
        return {
            "type": "array",
            "prefixItems": [_type_schema(arg) for arg in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if hint in (list, tuple) or origin in (list, tuple, collections.abc.Sequence):
        return {"type": "array", **({"items": _type_schema(args[0])} if args else {})}
    if hint is dict or origin in (dict, collections.abc.Mapping):
        if not args:
            return {"type": "object"}
        if args[0] is not str:
            raise TypeError(f"JSON object keys are strings, got {hint!r}")
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    raise TypeError(f"no JSON Schema for the type hint {hint!r}")


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    types_ = {_SCALAR_SCHEMAS.get(type(value)) for value in values}
    if len(types_) == 1 and None not in types_:
        return {"type": types_.pop(), "enum": values}
    return {"enum": values}


# --- Google-style docstrings ----------------------------------------------------------------

_SECTIONS = {
    "args", "arguments", "parameters", "params", "returns", "return", "yields", "yield",
    "raises", "examples", "example", "notes", "note", "attributes", "references", "see also",
    "warning", "warnings", "todo",
}  # fmt: skip
_ARG_SECTIONS = {"args", "arguments", "parameters", "params"}
_SECTION_HEADER = re.compile(r"(?P<name>[A-Za-z][A-Za-z ]*?)\s*:.*")
_ARG_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?:\((?P<type>[^)]*)\))?\s*:\s*(?P<text>.*)")
_DOC_TYPE = re.compile(r"(?P<outer>\w+)\s*(?:\[\s*(?P<inner>\w+)\s*\])?(?:\s*,\s*optional)?", re.I)
_DOC_TYPE_NAMES: dict[str, Any] = {
    "str": str, "string": str, "int": int, "integer": int, "float": float, "number": float,
    "bool": bool, "boolean": bool, "list": list, "array": list, "dict": dict, "object": dict,
    "any": Any,
}  # fmt: skip


@dataclass(frozen=True)
class _Docstring:
    summary: str
    args: dict[str, tuple[str | None, str]]  # name -> (type as written, description)


def _parse_docstring(doc: str | None) -> _Docstring:
    """Split a Google-style docstring into its text before any section and its ``Args``."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    args: dict[str, list[Any]] = {}
    section = entry = None
    entry_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION_HEADER.fullmatch(stripped) if indent == 0 else None
        if header and header["name"].lower() in _SECTIONS:
            section, entry = header["name"].lower(), None
            continue
        if section is None:
            summary.append(stripped)
        elif section in _ARG_SECTIONS and stripped:
            if entry is None:
                entry_indent = indent
            match = _ARG_ENTRY.fullmatch(stripped) if indent <= entry_indent else None
            if match:
                entry = match["name"]
                args[entry] = [match["type"], match["text"].strip()]
            elif entry is not None:
                args[entry][1] = f"{args[entry][1]} {stripped}".strip()
    paragraphs = " ".join(line or "\n\n" for line in summary).split("\n\n")
    text = "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    return _Docstring(text, {name: (kind, words) for name, (kind, words) in args.items()})


def _docstring_type(text: str | None) -> Any:
    """A Python type for a docstring type such as ``int``, ``list[int]`` or ``str, optional``."""
    match = _DOC_TYPE.fullmatch(text.strip()) if text else None
    if match is None:
        return Any
    outer = _DOC_TYPE_NAMES.get(match["outer"].lower())
    inner = _DOC_TYPE_NAMES.get((match["inner"] or "").lower())
    if outer is None or (match["inner"] and (outer is not list or inner is None)):
        return Any
    return list[inner] if match["inner"] else outer
