"""add-annotation: a mimeo transform plugin in Python (componentize-py).

Adds one annotation to `metadata.annotations` of every copy. Config:

    {"key": "example.com/tenant", "value": "{{target.namespace}}"}

`key` is required, non-empty and must not start with `mimeo.dev/` (mimeo's own annotations);
`value` defaults to "" and may contain `{{target.namespace}}`, replaced with the namespace the copy
is going to, and `{{inputs}}`, replaced with the names of the context's inputs joined by `,`
(empty when there are none). When the annotation already has that value the copy is left
`unchanged`.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import log
from wit_world.imports.types import (
    Context,
    Outcome,
    Outcome_Unchanged,
    Outcome_Write,
    PluginInfo,
)

NAME = "add-annotation-python"
VERSION = "0.1.0"
RESERVED_PREFIX = "mimeo.dev/"
TEMPLATE = "{{target.namespace}}"
INPUTS = "{{inputs}}"


def parse_config(config: str) -> tuple[str, str]:
    """Returns (key, value) or raises ValueError with the message the rule's status shows."""
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as e:
        raise ValueError(f"config is not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise ValueError("config must be a JSON object")
    key = parsed.get("key")
    if key is None:
        raise ValueError("config.key is required")
    if not isinstance(key, str):
        raise ValueError("config.key must be a string")
    if key == "":
        raise ValueError("config.key must not be empty")
    if key.startswith(RESERVED_PREFIX):
        raise ValueError(f"config.key must not start with {RESERVED_PREFIX} (mimeo's own annotations)")
    value = parsed.get("value")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValueError("config.value must be a string")
    return key, value


def describe_source(ctx: Context) -> str:
    src = ctx.source
    where = f"{src.namespace}/{src.name}" if src.namespace is not None else src.name
    return f"{src.kind} {where}"


class Transformer(exports.Transformer):
    def describe(self) -> PluginInfo:
        return PluginInfo(
            name=NAME,
            version=VERSION,
            description="Adds one annotation (key and value from the config; "
            "{{target.namespace}} and {{inputs}} in the value are replaced) to every copy. "
            "Written in Python.",
            kinds=[],
        )

    def validate_config(self, config: str) -> None:
        try:
            parse_config(config)
        except ValueError as e:
            raise Err(str(e))

    def transform(self, ctx: Context, object: str) -> Outcome:
        try:
            key, value = parse_config(ctx.config)
        except ValueError as e:
            raise Err(str(e))

        if TEMPLATE in value:
            if ctx.target.namespace is None:
                raise Err(
                    f"config.value uses {TEMPLATE} but the target has no namespace (cluster-scoped)"
                )
            value = value.replace(TEMPLATE, ctx.target.namespace)
        value = value.replace(INPUTS, ",".join(i.name for i in ctx.inputs))

        try:
            obj = json.loads(object)
        except json.JSONDecodeError as e:
            raise Err(f"object is not valid JSON: {e}")
        if not isinstance(obj, dict):
            raise Err("object must be a JSON object")
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict):
            raise Err("object.metadata must be an object")
        annotations = metadata.get("annotations")
        if annotations is None:
            annotations = {}
            metadata["annotations"] = annotations
        elif not isinstance(annotations, dict):
            raise Err("metadata.annotations must be an object")

        if annotations.get(key) == value:
            log.log(log.Level.INFO, f"annotation {key} already set on the copy of {describe_source(ctx)}")
            return Outcome_Unchanged()

        annotations[key] = value
        log.log(log.Level.INFO, f"set annotation {key} on the copy of {describe_source(ctx)}")
        return Outcome_Write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
