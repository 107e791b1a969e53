"""Tools written in Python: ``@tool`` turns an async function into a :class:`~.base.ToolSpec`.

The schema and calling convention are decided once, where the tool is defined; a definition that cannot work raises
:class:`ToolDefinitionError` there.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, NotRequired, overload

import pydantic
import pydantic_core
import typing_extensions

from .base import ToolContext, ToolOutput, ToolSpec

__all__ = ["InputSchema", "ToolDefinitionError", "ToolFunction", "tool"]

ToolFunction = Callable[..., Awaitable[Any]]
"""An async function that implements a tool."""

InputSchema = Mapping[str, Any] | type
"""The Claude Agent SDK's ``input_schema``: ``{"name": type, ...}``, a TypedDict class, or a JSON Schema."""

# JSON Schema keywords whose values are names or instance data, never schemas with a `title` to drop.
_NOT_SCHEMAS = frozenset({"default", "const", "enum", "examples"})
_NAMED_SCHEMAS = frozenset({"properties", "$defs", "patternProperties"})
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_WRAPPERS = (NotRequired, typing_extensions.NotRequired, typing_extensions.Required)  # a TypedDict key's required-ness


class ToolDefinitionError(TypeError):
    """A Python function cannot become a tool as written; the message names the function and the fix."""


def _strip_titles(schema: object) -> Any:
    """``schema`` without the ``title`` pydantic gives every model and field (noise in each request)."""
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, object] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = value if key in _NOT_SCHEMAS else _strip_titles(value)
    return out


def _described(annotation: object) -> object:
    """``Annotated[T, "text"]`` (the SDK's way to describe a field) as ``Annotated[T, Field(description="text")]``."""
    if typing.get_origin(annotation) is not Annotated:
        return annotation
    base, *meta = typing.get_args(annotation)
    converted = [pydantic.Field(description=m) if isinstance(m, str) else m for m in meta]
    return Annotated[(base, *converted)]


def _is_typed_dict(value: object) -> bool:
    return isinstance(value, type) and typing_extensions.is_typeddict(value)


def _typed_dict(
    name: str, fields: Mapping[str, object], required: frozenset[str], *, extra: Literal["allow", "forbid"]
) -> type:
    """A typing_extensions TypedDict (what pydantic reads on Python 3.11) with these fields."""
    declared = {key: (value if key in required else NotRequired[value]) for key, value in fields.items()}
    built = typing_extensions.TypedDict(name, declared)  # type: ignore[misc]  # a name known only at run time
    configured: type = pydantic.with_config(pydantic.ConfigDict(extra=extra))(built)
    return configured


def _from_typed_dict(cls: type) -> type:
    """A user's TypedDict (``typing``'s, which pydantic refuses before 3.12) rebuilt for pydantic."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except NameError as exc:
        raise ToolDefinitionError(
            f"the TypedDict {cls.__qualname__} names a type that cannot be found: {exc}"
        ) from None
    required = set(getattr(cls, "__required_keys__", hints))
    fields: dict[str, object] = {}
    for key, hint in hints.items():
        origin = typing.get_origin(hint)
        # Under `from __future__ import annotations` Python 3.11 cannot see NotRequired when it builds the
        # class (its required keys list every field): the resolved hint still says it.
        if origin in _WRAPPERS:
            (required.add if origin is typing_extensions.Required else required.discard)(key)
        fields[key] = _described(typing.get_args(hint)[0] if origin in _WRAPPERS else hint)
    return _typed_dict(cls.__name__, fields, frozenset(required), extra="forbid")


def _adapter(name: str, shape: type) -> pydantic.TypeAdapter[Any]:
    try:
        return pydantic.TypeAdapter(shape)
    except pydantic.PydanticSchemaGenerationError as exc:
        why = exc.message.split(". ")[0]  # pydantic's first sentence; the rest is advice about its own models
        raise ToolDefinitionError(
            f"tool {name!r}: a parameter's type has no JSON Schema ({why}); use str, int, "
            "float, bool, list, dict, Literal, an Enum, a TypedDict or a pydantic model, or pass input_schema="
        ) from None
    except pydantic.PydanticUserError as exc:
        raise ToolDefinitionError(f"tool {name!r}: its input types cannot be read: {exc.message}") from None


def _json_schema(name: str, adapter: pydantic.TypeAdapter[Any]) -> dict[str, Any]:
    try:
        schema = adapter.json_schema()
    except (pydantic.PydanticInvalidForJsonSchema, pydantic_core.PydanticSerializationError, TypeError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: its input has no JSON Schema ({exc}); pass input_schema=") from None
    stripped: dict[str, object] = _strip_titles(schema)
    return stripped


def _schema_of(name: str, input_schema: InputSchema) -> dict[str, Any]:
    """The JSON Schema the SDK's ``input_schema`` stands for."""
    if _is_typed_dict(input_schema):
        assert isinstance(input_schema, type)
        return _json_schema(name, _adapter(name, _from_typed_dict(input_schema)))
    if not isinstance(input_schema, Mapping):
        raise ToolDefinitionError(
            f"tool {name!r}: input_schema must be a dict of name → type, a TypedDict or a JSON Schema, "
            f"got {input_schema!r}"
        )
    if isinstance(input_schema.get("type"), str):  # a JSON Schema already
        return dict(input_schema)
    for field, kind in input_schema.items():
        if isinstance(kind, str):
            raise ToolDefinitionError(
                f"tool {name!r}: input_schema field {field!r} is the string {kind!r}; give a type ({{'{field}': "
                "str}), or a whole JSON Schema with 'type': 'object' and 'properties'"
            )
    fields = {field: _described(kind) for field, kind in input_schema.items()}
    shape = _typed_dict(f"{name}_input", fields, frozenset(fields), extra="forbid")
    return _json_schema(name, _adapter(name, shape))


def _is_context(annotation: object) -> bool:
    """A parameter that gets the call's ToolContext (by its annotation, resolved or not)."""
    return annotation is ToolContext or annotation == "ToolContext"


class _Call:
    """How one tool function is called: its parameters, the input model, where the context goes."""

    def __init__(self, name: str, fn: ToolFunction, input_schema: InputSchema | None) -> None:
        self.name = name
        self.fn = fn
        try:
            signature = inspect.signature(fn, eval_str=True)
        except NameError:  # a class defined in a function: its name stays a string, which only types need
            signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        self.context = next((p.name for p in params if _is_context(p.annotation)), None)
        self.params = [p for p in params if not _is_context(p.annotation)]
        # the parameters passed by position, in order (looked up once: a parameter's kind is a property)
        self.positional_only = tuple(p.name for p in self.params if p.kind is p.POSITIONAL_ONLY)
        if any(p.kind is p.VAR_POSITIONAL for p in self.params):
            raise ToolDefinitionError(
                f"tool {name!r}: {fn.__qualname__} takes *args, which a model cannot give; use a list parameter"
            )
        self.adapter: pydantic.TypeAdapter[Any] | None = None  # validates typed parameters into their types
        one = self.params[0] if len(self.params) == 1 and self.params[0].kind in _POSITIONAL else None
        if input_schema is not None:
            self.schema = _schema_of(name, input_schema)
            # the SDK's shape: one parameter that receives the whole input, not one of its fields
            self.dict_arg = one is not None and one.name not in self.schema.get("properties", {})
            if not self.dict_arg:
                self._check_covers(self.schema)
        elif one is not None and _is_typed_dict(one.annotation):  # the SDK's shape, typed by its TypedDict
            self.dict_arg = True
            self.schema = _schema_of(name, one.annotation)
        else:
            self.dict_arg = False
            self.adapter = _adapter(name, self._signature_shape())
            self.schema = _json_schema(name, self.adapter)

    def _signature_shape(self) -> type:
        fields: dict[str, object] = {}
        required: set[str] = set()
        for param in self.params:
            if param.kind is param.VAR_KEYWORD:
                continue
            if isinstance(param.annotation, str):
                raise ToolDefinitionError(
                    f"tool {self.name!r}: the type {param.annotation!r} of parameter {param.name!r} cannot be "
                    "resolved (a class defined inside a function?): define it at module level, or pass input_schema="
                )
            annotation = Any if param.annotation is param.empty else _described(param.annotation)
            if param.default is param.empty:
                required.add(param.name)
            else:
                annotation = Annotated[annotation, pydantic.Field(default=param.default)]
            fields[param.name] = annotation
        open_ended = any(p.kind is p.VAR_KEYWORD for p in self.params)  # **kwargs takes fields it does not name
        return _typed_dict(f"{self.name}_input", fields, frozenset(required), extra="allow" if open_ended else "forbid")

    def _check_covers(self, schema: Mapping[str, Any]) -> None:
        """An explicit schema for typed parameters must name each parameter without a default, and no other."""
        properties = set(schema.get("properties", {}))
        named = {p.name for p in self.params if p.kind is not p.VAR_KEYWORD}
        needed = {p.name for p in self.params if p.default is p.empty and p.kind is not p.VAR_KEYWORD}
        missing = sorted(needed - properties)
        unknown = sorted(properties - named) if not any(p.kind is p.VAR_KEYWORD for p in self.params) else []
        if missing or unknown:
            parts = [f"parameters {missing} are not in its input_schema"] if missing else []
            parts += [f"input_schema fields {unknown} are no parameter of it"] if unknown else []
            raise ToolDefinitionError(
                f"tool {self.name!r}: {self.fn.__qualname__} does not match its input_schema: {'; '.join(parts)}. "
                "Take one dict argument (the Claude Agent SDK's shape) or one parameter per field"
            )

    async def __call__(self, tool_input: Mapping[str, object], ctx: ToolContext) -> ToolOutput:
        extra = {self.context: ctx} if self.context is not None else {}
        if self.dict_arg:
            return _output(await self.fn(dict(tool_input), **extra))
        values = dict(tool_input) if self.adapter is None else self.adapter.validate_python(dict(tool_input))
        if not self.positional_only:  # the usual function: every parameter by name
            return _output(await self.fn(**values, **extra))
        positional = [values.pop(name) for name in self.positional_only if name in values]
        return _output(await self.fn(*positional, **values, **extra))


def _output(value: object) -> ToolOutput:
    """What a tool function returned, as the tool's output."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(content=value)
    if value is None:
        return ToolOutput(content="")
    if isinstance(value, Mapping) and "content" in value:
        return ToolOutput(content=_content_text(value["content"]), is_error=bool(value.get("is_error", False)))
    try:
        return ToolOutput(content=json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"the tool returned {type(value).__name__}, which is not text: return a str, "
            '{"content": [{"type": "text", "text": ...}]} or a JSON value'
        ) from exc


def _content_text(content: object) -> str:
    """The SDK's ``content`` (a list of blocks, or a str) as text; blocks other than text are named, not sent."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TypeError(f'"content" must be a list of blocks, got {type(content).__name__}')
    texts: list[str] = []
    dropped: list[str] = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            dropped.append(str(block.get("type")) if isinstance(block, Mapping) else type(block).__name__)
    if dropped:
        texts.append(f"[{len(dropped)} block(s) of type {', '.join(dropped)} dropped: tool results carry text only]")
    return "\n".join(texts)


def _hint(annotations: object, key: str) -> bool | None:
    """One MCP tool annotation (``readOnlyHint``, ``idempotentHint``) from a dict or the SDK's ToolAnnotations."""
    value = annotations.get(key) if isinstance(annotations, Mapping) else getattr(annotations, key, None)
    return value if isinstance(value, bool) else None


def _make_tool(
    fn: ToolFunction,
    *,
    name: str | None,
    description: str | None,
    input_schema: InputSchema | None,
    annotations: object,
    read_only: bool | None,
    idempotent: bool | None,
    concurrency_safe: bool | None,
    attempt_fields: Iterable[str],
) -> ToolSpec:
    if not inspect.iscoroutinefunction(fn):
        raise ToolDefinitionError(
            f"{getattr(fn, '__qualname__', fn)!r} cannot be a tool: it must be an async function (async def); "
            "run blocking work inside it with `await asyncio.to_thread(...)`"
        )
    tool_name = name or fn.__name__
    text = description or inspect.getdoc(fn)
    if not text:
        raise ToolDefinitionError(
            f"tool {tool_name!r} needs a description for the model: pass description= or give "
            f"{fn.__qualname__} a docstring"
        )
    call = _Call(tool_name, fn, input_schema)
    unknown = sorted(set(attempt_fields) - set(call.schema.get("properties", {})))
    if unknown:
        raise ToolDefinitionError(f"tool {tool_name!r}: attempt_fields {unknown} are not fields of its input")
    read_only = read_only if read_only is not None else bool(_hint(annotations, "readOnlyHint"))
    if idempotent is None:
        hinted = _hint(annotations, "idempotentHint")
        idempotent = hinted if hinted is not None else read_only
    try:
        return ToolSpec(
            name=tool_name,
            description=text,
            input_schema=call.schema,
            read_only=read_only,
            idempotent=idempotent,
            concurrency_safe=concurrency_safe if concurrency_safe is not None else read_only,
            attempt_fields=tuple(attempt_fields),
            run=call,
        )
    except ValueError as exc:
        raise ToolDefinitionError(f"{fn.__qualname__} cannot be the tool {tool_name!r}: {exc}") from None


@overload
def tool(fn: ToolFunction, /) -> ToolSpec: ...


@overload
def tool(
    name: str | None = None,
    description: str | None = None,
    input_schema: InputSchema | None = None,
    annotations: object = None,
    *,
    read_only: bool | None = None,
    idempotent: bool | None = None,
    concurrency_safe: bool | None = None,
    attempt_fields: Iterable[str] = (),
) -> Callable[[ToolFunction], ToolSpec]: ...


def tool(
    name: str | ToolFunction | None = None,
    description: str | None = None,
    input_schema: InputSchema | None = None,
    annotations: object = None,
    *,
    read_only: bool | None = None,
    idempotent: bool | None = None,
    concurrency_safe: bool | None = None,
    attempt_fields: Iterable[str] = (),
) -> ToolSpec | Callable[[ToolFunction], ToolSpec]:
    """Turn an async function into a tool — the Claude Agent SDK's ``@tool(name, description, input_schema)``.

    ``name`` defaults to the function's name, ``description`` to its docstring. Without
    ``input_schema`` the schema is derived from the typed parameters (``Annotated[int,
    Field(description=...)]`` or ``Annotated[int, "..."]`` describes one; a default makes
    it optional) and the function is called with them, validated into their types.
    With it (a dict of name → type, a TypedDict, or a JSON Schema), a function of one
    parameter that is not one of its fields gets the whole input as a dict (the SDK's
    shape). ``read_only`` (default: the annotations' ``readOnlyHint``, else False),
    ``idempotent`` (default: ``idempotentHint``, else ``read_only``; a tool that is not is
    recorded in the side-effect ledger and never re-run blindly) and
    ``concurrency_safe`` (default ``read_only``: may run beside other safe calls) tell the
    loop how to schedule it; ``attempt_fields`` name input fields that identify one
    attempt (an idempotency key), which the ledger leaves out when it asks whether a
    call repeats one that completed. Used bare (``@tool``) or called (``@tool("add", "Add two
    numbers")``); returns a :class:`~.base.ToolSpec`.
    """
    make = functools.partial(
        _make_tool,
        description=description,
        input_schema=input_schema,
        annotations=annotations,
        read_only=read_only,
        idempotent=idempotent,
        concurrency_safe=concurrency_safe,
        attempt_fields=attempt_fields,
    )
    if callable(name):  # used bare: @tool
        return make(name, name=None)
    return functools.partial(make, name=name)
