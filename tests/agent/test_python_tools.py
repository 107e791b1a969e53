"""Tools written in Python: the schema ``@tool`` derives, how the function is called, what its answer becomes,
and the definitions it refuses — plus custom tools in a run's registry."""

from __future__ import annotations

import asyncio
import enum
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import pydantic
import pytest

from queryloop.handlers.messages import ToolCall
from queryloop.handlers.tools import (
    PermissionRules,
    ToolContext,
    ToolDefinitionError,
    ToolOutput,
    ToolSpec,
    run_tool_calls,
    tool,
)
from queryloop.handlers.tools.services.dispatch import ToolRegistry, validation_problems
from queryloop.handlers.tools.services.rules import parse_rule
from queryloop.run.config import AgentOptions, PermissionSettings, RequestSettings, ToolSettings
from queryloop.run.services import tool_registry as _registry


def _run(spec: ToolSpec, tool_input: dict[str, Any], tmp_path: Path) -> ToolOutput:
    return asyncio.run(spec.run(tool_input, ToolContext(cwd=tmp_path)))


def _result(spec: ToolSpec, tool_input: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The tool_result block the dispatcher makes of one call (schema validation and error handling included)."""
    call = ToolCall(id="toolu_1", name=spec.name, input=tool_input)
    (block,) = asyncio.run(run_tool_calls([call], ToolRegistry(tools=[spec]), ToolContext(cwd=tmp_path)))
    return dict(block)


class Unit(enum.Enum):
    celsius = "celsius"
    kelvin = "kelvin"


class Search(TypedDict):
    query: str
    mode: NotRequired[Literal["exact", "fuzzy"]]


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


# ---- the schema -------------------------------------------------------------------------------


def test_typed_parameters_give_required_fields_optional_ones_with_defaults_and_descriptions() -> None:
    @tool
    async def convert(
        value: float,
        unit: Annotated[Unit, "the unit to convert to"] = Unit.kelvin,
        precision: Annotated[int, pydantic.Field(description="decimals", ge=0)] = 2,
    ) -> str:
        """Convert a temperature."""
        return ""

    assert convert.name == "convert" and convert.description == "Convert a temperature."
    assert convert.input_schema == {
        "$defs": {"Unit": {"enum": ["celsius", "kelvin"], "type": "string"}},
        "additionalProperties": False,
        "properties": {
            "value": {"type": "number"},
            "unit": {"$ref": "#/$defs/Unit", "default": "kelvin", "description": "the unit to convert to"},
            "precision": {"default": 2, "description": "decimals", "minimum": 0, "type": "integer"},
        },
        "required": ["value"],
        "type": "object",
    }


def test_pydantic_titles_are_dropped_but_a_field_named_title_is_kept() -> None:
    @tool
    async def rename(title: str, point: Point | None = None) -> str:
        """Rename."""
        return ""

    schema = rename.input_schema
    assert set(schema["properties"]) == {"title", "point"}
    assert "title" not in schema and "title" not in schema["$defs"]["Point"]
    assert schema["properties"]["title"] == {"type": "string"}


def test_the_sdk_shorthand_makes_every_field_required_and_passes_the_whole_input_as_a_dict(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    @tool("greet", "Greet a user", {"name": str, "times": Annotated[int, "how often"]})
    async def greet(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"content": [{"type": "text", "text": f"Hello, {args['name']}!"}]}

    assert greet.input_schema == {
        "additionalProperties": False,
        "properties": {"name": {"type": "string"}, "times": {"description": "how often", "type": "integer"}},
        "required": ["name", "times"],
        "type": "object",
    }
    assert _run(greet, {"name": "Ada", "times": 1}, tmp_path) == ToolOutput(content="Hello, Ada!")
    assert seen == [{"name": "Ada", "times": 1}]


def test_a_typed_dict_schema_keeps_its_optional_keys_optional(tmp_path: Path) -> None:
    @tool("search", "Search the notes", Search)
    async def search(args: Search) -> str:
        return args.get("mode", "exact")

    assert search.input_schema["required"] == ["query"]
    assert search.input_schema["properties"]["mode"] == {"enum": ["exact", "fuzzy"], "type": "string"}
    assert _run(search, {"query": "q"}, tmp_path).content == "exact"

    @tool("search2", "Search the notes")
    async def typed(args: Search) -> str:  # one TypedDict parameter: the SDK's shape, typed
        return args["query"]

    assert typed.input_schema == search.input_schema
    assert _run(typed, {"query": "q"}, tmp_path).content == "q"


def test_an_explicit_json_schema_is_sent_as_given_and_its_fields_become_keyword_arguments(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string", "pattern": "^/"}}, "required": ["path"]}

    @tool("stat", "Stat a file", schema)
    async def stat(path: str) -> str:
        return path.upper()

    assert stat.input_schema == schema
    assert _run(stat, {"path": "/x"}, tmp_path).content == "/X"


def test_typed_arguments_are_validated_into_their_types_and_the_context_is_passed_by_annotation(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []

    @tool
    async def place(point: Point, unit: Unit, ctx: ToolContext, tags: list[str] | None = None) -> str:
        """Place a point."""
        seen.extend([point, unit, ctx.cwd, tags])
        return "ok"

    assert "ctx" not in place.input_schema["properties"]
    assert _run(place, {"point": {"x": 1}, "unit": "celsius"}, tmp_path).content == "ok"
    assert seen == [Point(x=1, y=0), Unit.celsius, tmp_path.resolve(), None]


def test_a_schema_violation_is_refused_before_the_function_runs(tmp_path: Path) -> None:
    calls: list[int] = []

    @tool
    async def double(n: int) -> str:
        """Double n."""
        calls.append(n)
        return str(2 * n)

    assert validation_problems(double, {"n": "3", "m": 1}) == [
        "input: Additional properties are not allowed ('m' was unexpected)",
        "field 'n': '3' is not of type 'integer'",
    ]
    result = _result(double, {"n": "3"}, tmp_path)
    assert result["is_error"] is True and calls == []


# ---- flags ------------------------------------------------------------------------------------


def test_a_tool_is_neither_read_only_nor_idempotent_unless_it_says_so() -> None:
    @tool
    async def plain() -> str:
        """Do something."""
        return ""

    @tool(read_only=True)
    async def reader() -> str:
        """Read something."""
        return ""

    @tool("hinted", "Hinted", {}, {"readOnlyHint": True, "idempotentHint": False})
    async def hinted(args: dict[str, Any]) -> str:
        return ""

    @tool(read_only=True, concurrency_safe=False, idempotent=False)
    async def explicit() -> str:
        """Explicit."""
        return ""

    flags = [(t.read_only, t.idempotent, t.concurrency_safe) for t in (plain, reader, hinted, explicit)]
    assert flags == [(False, False, False), (True, True, True), (True, False, True), (True, False, False)]


def test_attempt_fields_name_fields_of_the_input() -> None:
    @tool(attempt_fields=["idempotency_key"])
    async def deploy(release: str, idempotency_key: str) -> str:
        """Deploy a release."""
        return ""

    assert deploy.attempt_fields == ("idempotency_key",)
    with pytest.raises(ToolDefinitionError, match=r"attempt_fields \['request_id'\] are not fields of its input"):
        tool(attempt_fields=["request_id"])(_two)


# ---- what the function returns -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("text", ToolOutput(content="text")),
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, ToolOutput(content="a\nb")),
        ({"content": [{"type": "text", "text": "bad"}], "is_error": True}, ToolOutput(content="bad", is_error=True)),
        (
            {"content": [{"type": "text", "text": "see"}, {"type": "image", "data": "...", "mimeType": "image/png"}]},
            ToolOutput(content="see\n[1 block(s) of type image dropped: tool results carry text only]"),
        ),
        (ToolOutput(content="as is", is_error=True), ToolOutput(content="as is", is_error=True)),
        (None, ToolOutput(content="")),
        ({"total": 3, "items": ["a"]}, ToolOutput(content='{"total": 3, "items": ["a"]}')),
        (42, ToolOutput(content="42")),
    ],
)
def test_what_a_tool_returns_becomes_its_output(answer: Any, expected: ToolOutput, tmp_path: Path) -> None:
    @tool
    async def answer_it() -> Any:
        """Answer."""
        return answer

    assert _run(answer_it, {}, tmp_path) == expected


def test_an_exception_or_an_answer_that_is_not_text_becomes_an_error_result(tmp_path: Path) -> None:
    @tool
    async def broken() -> str:
        """Break."""
        raise ValueError("disk on fire")

    @tool
    async def opaque() -> object:
        """Answer with an object."""
        return object()

    assert _result(broken, {}, tmp_path) == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "broken failed with ValueError: disk on fire",
        "is_error": True,
    }
    refused = _result(opaque, {}, tmp_path)
    assert (
        refused["is_error"] is True and "opaque failed with TypeError: the tool returned object" in refused["content"]
    )


# ---- definitions it refuses ---------------------------------------------------------------------------


def _sync(a: int) -> str:
    """Not async."""
    return ""


async def _undocumented(a: int) -> str:
    return ""


class Opaque:
    pass


async def _opaque(a: Opaque) -> str:
    """Takes something without a schema."""
    return ""


async def _star(*values: int) -> str:
    """Takes *args."""
    return ""


async def _two(a: int, b: int) -> str:
    """Two parameters."""
    return ""


async def _one(args: dict[str, Any]) -> str:
    return ""


def _local_class() -> ToolSpec:
    class Local(TypedDict):
        x: int

    async def uses(a: Local) -> str:
        """Uses a class this module's globals do not hold."""
        return ""

    return tool(uses)


@pytest.mark.parametrize(
    ("define", "message"),
    [
        (lambda: tool(_sync), "must be an async function (async def)"),
        (lambda: tool(_undocumented), "needs a description for the model: pass description= or give"),
        (lambda: tool(_opaque), "a parameter's type has no JSON Schema (Unable to generate pydantic-core schema for"),
        (lambda: tool(_star), "takes *args, which a model cannot give; use a list parameter"),
        (
            lambda: tool("two", "Two", {"a": int, "c": int})(_two),
            "parameters ['b'] are not in its input_schema; input_schema fields ['c'] are no parameter of it",
        ),
        (lambda: tool("x", "X", {"a": "string"})(_two), "input_schema field 'a' is the string 'string'; give a type"),
        (lambda: tool("x", "X", {"type": "array"})(_one), "a tool input_schema must have type 'object'"),
        (_local_class, "the type 'Local' of parameter 'a' cannot be resolved (a class defined inside a function?)"),
        (lambda: tool("no spaces", "X")(_two), "tool name 'no spaces' must match"),
    ],
)
def test_a_definition_that_cannot_work_is_refused_naming_the_fix(define: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        define()
    assert message in str(raised.value)


# ---- custom tools in a run ------------------------------------------------------------------------------


@tool
async def ping() -> str:
    """Ping."""
    return "pong"


def test_custom_tools_are_offered_after_the_allowed_built_ins_and_a_bare_deny_rule_hides_them(tmp_path: Path) -> None:
    options = AgentOptions(
        prompt="p",
        cwd=tmp_path,
        request=RequestSettings(model="m"),
        tools=ToolSettings(builtins=("Read", "Bash"), custom_tools=[ping]),
    )
    assert _registry(options).names == ("Read", "Bash", "ping")
    no_builtins = AgentOptions(
        prompt="p",
        cwd=tmp_path,
        request=RequestSettings(model="m"),
        tools=ToolSettings(builtins=(), custom_tools=[ping]),
    )
    assert _registry(no_builtins).names == ("ping",)
    denied = AgentOptions(
        prompt="p",
        cwd=tmp_path,
        request=RequestSettings(model="m"),
        tools=ToolSettings(custom_tools=[ping]),
        permissions=PermissionSettings(rules=PermissionRules(deny=(parse_rule("ping"),))),
    )
    assert "ping" not in _registry(denied).names


def test_a_custom_tool_named_as_a_built_in_or_a_plain_function_is_refused(tmp_path: Path) -> None:
    @tool("Bash", "Not the real one")
    async def fake(command: str) -> str:
        return ""

    with pytest.raises(ValueError, match="the custom tool 'Bash' has the name of a built-in tool; give it another"):
        AgentOptions(
            prompt="p", cwd=tmp_path, request=RequestSettings(model="m"), tools=ToolSettings(custom_tools=[fake])
        )
    with pytest.raises(ValueError, match="two custom tools are named 'ping'"):
        AgentOptions(
            prompt="p", cwd=tmp_path, request=RequestSettings(model="m"), tools=ToolSettings(custom_tools=[ping, ping])
        )
    with pytest.raises(TypeError, match=r"decorate _undocumented with @queryloop\.tool first"):
        AgentOptions(
            prompt="p",
            cwd=tmp_path,
            request=RequestSettings(model="m"),
            tools=ToolSettings(custom_tools=[_undocumented]),
        )  # type: ignore[list-item]
