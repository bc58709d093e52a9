"""Tool-calling conversations as TRL's SFTTrainer takes them (its dataset_formats, "Tool
Calling"): `messages` whose assistant turns may call functions (`tool_calls`) and whose `tool`
turns give the results, beside a `tools` column of the functions' JSON schemas, which TRL hands
to the chat template (`apply_chat_template(..., tools=...)`). The `make` of the
`tool_messages` shape (`row_shapes.SHAPES`).

Each message is kept as written (a `tool` turn's `name` or `tool_call_id` too), less the empty
keys Arrow gives every message of a file (a key one message has, all get, as null); a call's
arguments written as JSON text (OpenAI's way) are decoded, since chat templates render them as
objects. Checked, with the row named: the roles, the order of the turns (a `tool` turn answers
a call, a call is answered, user and assistant alternate around the calls), and that every call
names a function the row's `tools` declares.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from recipe_engine.resolve.converters import CHATML_EXAMPLE, Message, Row, TrlRow

TOOL_ROLES = ("system", "user", "assistant", "tool")
TOOLS_EXAMPLE = (
    '[{"type": "function", "function": {"name": "...", "description": "...", '
    '"parameters": {"type": "object", "properties": {...}}}}]'
)
CALL_EXAMPLE = '{"type": "function", "function": {"name": "...", "arguments": {...}}}'


def tool_messages_row(row: Row) -> TrlRow:
    """The row's conversation (after its `system` column's message) and its tools, checked;
    the tools as JSON text (TRL decodes it), whatever functions other rows declare."""
    tools = _tools(row)
    names = [tool["function"]["name"] for tool in tools]
    written = row.message_list("messages", "{role, content}", CHATML_EXAMPLE)
    messages = row.with_system([_message(row, j, m, names) for j, m in enumerate(written, 1)])
    _check_order(row, messages)
    return {"messages": messages, "tools": json.dumps(tools)}


def as_written(value: Any) -> Any:
    """`value` without the null keys Arrow fills in (a key of one object is every object's)."""
    if isinstance(value, Mapping):
        return {k: as_written(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_written(item) for item in value]
    return value


def _decoded(value: Any) -> Any:
    """JSON text (a CSV cell, OpenAI's arguments) decoded; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def _tools(row: Row) -> list[dict[str, Any]]:
    tools = as_written(_decoded(row.get("tools")))
    functions = tools if isinstance(tools, list) else []
    if not functions or not all(
        isinstance(tool, Mapping)
        and isinstance(tool.get("function"), Mapping)
        and isinstance(tool["function"].get("name"), str)
        for tool in functions
    ):
        raise row.fail(
            f"`{row.name('tools')}` must be a non-empty list of function schemas "
            '({"type": "function", "function": {"name": ...}})',
            f"Write it like {TOOLS_EXAMPLE}.",
        )
    return functions


def _message(row: Row, j: int, message: Any, names: list[str]) -> Message:
    role = message.get("role") if isinstance(message, Mapping) else None
    if role not in TOOL_ROLES:
        problem = f"has role `{role}`" if role else "is not a {role, content} object"
        raise row.fail(
            f"message {j} of `{row.name('messages')}` {problem}",
            f"Roles in tool-calling conversations are {', '.join(TOOL_ROLES)}.",
        )
    kept = as_written(dict(message))
    calls = kept.get("tool_calls")
    if calls is not None and role != "assistant":
        raise row.fail(f"message {j} is from `{role}` but has `tool_calls`", _CALLS_FIX)
    if calls is None:
        kept["content"] = row.text_content(j, kept.get("content"))
        return kept
    if not isinstance(calls, list) or not calls:
        raise row.fail(f"`tool_calls` of message {j} must be a non-empty list", _CALLS_FIX)
    kept["tool_calls"] = [_call(row, j, call, names) for call in calls]
    if not kept.get("content"):  # a call without words: no empty text for the template
        kept.pop("content", None)
    return kept


_CALLS_FIX = f"Only assistant turns call tools; write each call like {CALL_EXAMPLE}."


def _call(row: Row, j: int, call: Any, names: list[str]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise row.fail(
            f"a tool call of message {j} is not a {{type, function: {{name, arguments}}}} object",
            f"Write each call like {CALL_EXAMPLE}.",
        )
    if function["name"] not in names:
        raise row.fail(
            f"message {j} calls `{function['name']}`, which the row's "
            f"`{row.name('tools')}` does not declare (functions: {', '.join(names)})",
            "Add the function's JSON schema to `tools`, or fix the call's name.",
        )
    arguments = _decoded(function.get("arguments", {}))
    if not isinstance(arguments, Mapping):
        raise row.fail(
            f"the arguments of `{function['name']}` in message {j} are not an object",
            'Write them as an object like {"a": 1} (or JSON text of one).',
        )
    return {
        **call,
        "type": call.get("type", "function"),
        "function": {**function, "arguments": arguments},
    }


def _check_order(row: Row, messages: list[Message]) -> None:
    """A `tool` turn follows a call (or another result); a call is followed by its result;
    around the calls, an optional system message, then user and assistant turns in
    alternation, ending with the assistant's (`RowConverter.check_turns`)."""
    turns: list[str] = []
    for j, message in enumerate(messages, start=1):
        role = message["role"]
        if role == "tool" and (not turns or turns[-1] not in ("call", "tool")):
            raise row.fail(
                f"message {j} is a `tool` turn that answers no call (the message before it is "
                "not an assistant turn with `tool_calls`)",
                "Put each tool result right after the assistant turn whose call it answers.",
            )
        if role != "tool" and turns and turns[-1] == "call":
            raise row.fail(
                f"message {j - 1} calls a tool, but message {j} is from `{role}`, not a `tool` "
                "turn with the result",
                "Follow each assistant turn with `tool_calls` by the `tool` turns answering it.",
            )
        turns.append("call" if message.get("tool_calls") else role)
    folded: list[str] = []  # a call and its results belong to the assistant's turn
    for turn in ("assistant" if t in ("call", "tool") else t for t in turns):
        if not (folded and folded[-1] == turn == "assistant"):
            folded.append(turn)
    row.check_turns(folded)
