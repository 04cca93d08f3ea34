"""Check declared resources' inputs against the providers' own definitions, as their Python SDKs state them.

Each Pulumi provider SDK (pulumi_aws, pulumi_gcp, pulumi_azure_native) is generated from the provider's
schema. What the schema says about a resource's inputs survives in the SDK as:

- the type token -> class registration each SDK makes on import (`_utilities.register`, which calls
  `pulumi.runtime.register_resource_module(pkg, mod, Module)`; the module's `mod_info["classes"]` maps
  the token to the class name, `mod_info["fqn"]` names the Python module). Looked up exactly as the
  runtime does when it rehydrates a resource reference (`pulumi.runtime.rpc.get_resource_module`).
- the resource's `<Class>Args` class and the nested `*Args` classes, all `@pulumi.input_type`: each
  property getter carries its engine (camelCase) name in `@pulumi.getter(name=...)`, which
  `pulumi._types.input_type_py_to_pulumi_names` reads back; its return annotation is the property's
  type (`pulumi._types._raw_return_hints`, the SDK's own resolver, used when it deserialises outputs);
  the class's `__init__` parameters without a default are the schema's required inputs (the generated
  resource `_internal_init` raises "Missing required property" for exactly these).
- `Union[str, SomeEnum]` annotations where the schema declares an enum (azure-native's are its REST
  specs' enums; pulumi-aws and pulumi-gcp have a few).

`check_resource(token, inputs)` walks a resource's captured inputs (engine names, plain values, as the
mock runtime records them) against that and returns every `Violation`: an unknown property name, a
missing required input, a value whose kind the SDK does not allow there, a string that is not a member
of the enum the SDK types the property with.
"""

from __future__ import annotations

import collections
import collections.abc
import difflib
import enum
import importlib
import inspect
import json
import re
import sys
import typing
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pulumi
from pulumi import _types as pulumi_types
from pulumi.runtime import rpc


@dataclass(frozen=True)
class Violation:
    kind: str  # unknown-property, missing-required, enum, type, unresolved
    token: str
    path: str  # engine property path, e.g. virtualMachineProfile.priority or sku.name or rules[0].action
    message: str

    def __str__(self) -> str:
        return f"{self.token} {self.path or '<inputs>'}: {self.message}"


class SdkLookupError(LookupError):
    pass


def sdk_module_name(package: str) -> str:
    """azure-native -> pulumi_azure_native; aws -> pulumi_aws."""
    return "pulumi_" + package.replace("-", "_")


@cache
def resource_class(token: str) -> type:
    """The SDK class for a type token, found through the SDK's own registration with the runtime."""
    parts = token.split(":")
    if len(parts) != 3:
        raise SdkLookupError(f"{token!r} is not a pkg:module:Type token")
    pkg, mod, name = parts
    if pkg == "pulumi" and mod == "providers":
        importlib.import_module(sdk_module_name(name))
        package = rpc.get_resource_package(name, "")
        info = getattr(package, "pkg_info", None)
        if info is None:
            raise SdkLookupError(f"no provider package registered for {token}")
        return getattr(importlib.import_module(info["fqn"]), info["class"])
    importlib.import_module(sdk_module_name(pkg))  # registers its resource modules
    module = rpc.get_resource_module(pkg, mod, "")
    info = getattr(module, "mod_info", None)
    if info is None:
        raise SdkLookupError(
            f"the {sdk_module_name(pkg)} SDK registers no module {pkg}:{mod} (token {token})"
        )
    class_name = info["classes"].get(token)
    if class_name is None:
        raise SdkLookupError(f"the {sdk_module_name(pkg)} SDK's module {pkg}:{mod} has no resource {token}")
    return getattr(importlib.import_module(info["fqn"]), class_name)


@cache
def args_class(token: str) -> type:
    """The resource's own Args class: the one `@pulumi.input_type` its module defines and exports beside it,
    `<Class>Args`, or `<Class>InitArgs` where a nested type already has that name (pulumi_aws
    s3.BucketVersioningInitArgs). It is what `__init__(name, args, opts)` takes and what
    `_utilities.get_resource_args_opts` builds from keyword arguments."""
    cls = resource_class(token)
    module = importlib.import_module(cls.__module__)
    own = [
        getattr(module, name)
        for name in getattr(module, "__all__", ())
        if name in (cls.__name__ + "Args", cls.__name__ + "InitArgs")
    ]
    own = [
        c
        for c in own
        if isinstance(c, type) and c.__module__ == module.__name__ and pulumi_types.is_input_type(c)
    ]
    if len(own) != 1:
        raise SdkLookupError(
            f"{module.__name__} exports {len(own)} Args classes for {cls.__name__}, expected one"
        )
    return own[0]


@cache
def engine_names(input_cls: type) -> dict[str, str]:
    """Python name -> engine name for an input type, from its `@pulumi.getter(name=...)` metadata."""
    return pulumi_types.input_type_py_to_pulumi_names(input_cls)


@cache
def property_hints(input_cls: type) -> dict[str, Any]:
    """Engine name -> the getter's resolved annotation (Input/Optional not yet unwrapped): what pulumi's own
    `_raw_return_hints` resolves when it deserialises values, or the same resolution done here should a
    later pulumi rename that private helper."""
    raw = getattr(pulumi_types, "_raw_return_hints", None)
    if raw is not None:
        return dict(raw(input_cls))
    globalns: dict[str, Any] = {}
    for base in reversed(input_cls.__mro__):
        module = sys.modules.get(base.__module__)
        if module is not None:
            globalns.update(vars(module))
    localns = {"Output": pulumi.Output, "T": type(None)}
    hints = {}
    for python_name, engine_name in engine_names(input_cls).items():
        getter = getattr(input_cls, python_name).fget
        hints[engine_name] = typing.get_type_hints(getter, globalns=globalns, localns=localns).get("return")
    return hints


@cache
def required_properties(input_cls: type) -> frozenset[str]:
    """Engine names of the `__init__` keyword parameters with no default: the schema's required inputs."""
    names = engine_names(input_cls)
    required = set()
    for param in inspect.signature(input_cls.__init__).parameters.values():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        if param.default is inspect.Parameter.empty:
            required.add(names.get(param.name, param.name))
    return frozenset(required)


def _flatten(hint: Any) -> list[Any]:
    if typing.get_origin(hint) is typing.Union:
        out: list[Any] = []
        for arg in typing.get_args(hint):
            out.extend(_flatten(arg))
        return out
    return [hint]


_SEQUENCES = (list, collections.abc.Sequence, tuple)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def alternatives(hint: Any) -> list[Any]:
    """The kinds of plain value a property annotation allows: Input/Awaitable/Output/Optional wrappers and
    the TypedDict twins of *Args classes dropped, unions flattened, duplicates removed."""
    out: list[Any] = []
    for alt in _flatten(hint):
        origin = typing.get_origin(alt)
        if (
            alt is type(None)
            or origin in (collections.abc.Awaitable, typing.Awaitable)
            or origin is pulumi.Output
        ):
            continue
        if alt is pulumi.Output:
            continue
        if isinstance(alt, type) and typing.is_typeddict(alt):
            continue
        if alt not in out:
            out.append(alt)
    return out


def _is_enum(alt: Any) -> bool:
    return isinstance(alt, type) and issubclass(alt, enum.Enum)


def enum_values(alt: type[enum.Enum]) -> list[Any]:
    return [member.value for member in alt]


def _describe(alts: list[Any]) -> str:
    def name(a: Any) -> str:
        if isinstance(a, type):
            return a.__name__
        return str(a).replace("typing.", "").replace("collections.abc.", "")

    return " | ".join(name(a) for a in alts)


class _Walker:
    def __init__(self, token: str, provider: bool) -> None:
        self.token = token
        self.provider = provider  # provider inputs: non-string values arrive JSON-encoded
        self.violations: list[Violation] = []
        self.stats: collections.Counter[str] = collections.Counter()  # what was looked at, by check

    def report(self, kind: str, path: str, message: str) -> None:
        self.violations.append(Violation(kind, self.token, path, message))

    def object(self, value: dict, input_cls: type, path: str) -> None:
        self.stats["object"] += 1
        self.stats["property"] += len(value)
        names = set(engine_names(input_cls).values())
        hints = property_hints(input_cls)
        for key in sorted(required_properties(input_cls)):
            if value.get(key) is None:
                self.report(
                    "missing-required",
                    _join(path, key),
                    f"required input {key!r} of {input_cls.__name__} is missing",
                )
        for key, item in value.items():
            sub = _join(path, key)
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.report(
                    "unknown-property",
                    sub,
                    f"{input_cls.__name__} has no property {key!r}{hint} (it has: {', '.join(sorted(names))})",
                )
                continue
            if key in hints:
                self.value(item, hints[key], sub)

    def value(self, value: Any, hint: Any, path: str) -> None:
        if value is None:
            return
        alts = alternatives(hint)
        if not alts or typing.Any in alts or object in alts:
            return
        if isinstance(value, str) and self.provider and str not in alts:
            try:
                value = json.loads(value)
            except ValueError:
                pass
        enums = [a for a in alts if _is_enum(a)]
        if isinstance(value, bool):
            if bool in alts:
                return
            self._type(value, alts, path)
        elif isinstance(value, int | float):
            if float in alts or (int in alts and float(value).is_integer()):
                return
            if enums and any(value in enum_values(e) for e in enums):
                return
            self._type(value, alts, path)
        elif isinstance(value, str):
            if enums:
                self.stats["enum"] += 1
                self.stats["enum " + re.sub(r"\[[^\]]*\]", "", path)] += 1
                allowed = [v for e in enums for v in enum_values(e)]
                if value not in allowed:
                    self.report(
                        "enum",
                        path,
                        f"{value!r} is not a member of {' / '.join(e.__name__ for e in enums)}; "
                        f"allowed: {', '.join(repr(v) for v in allowed)}",
                    )
                return
            if str in alts:
                objects = [a for a in alts if isinstance(a, type) and pulumi_types.is_input_type(a)]
                if objects and value.lstrip().startswith("{"):
                    # A JSON document given as a string where the SDK also types the document (pulumi_aws's
                    # IAM policies: Union[str, PolicyDocumentArgs]): the parsed document is checked as well.
                    self.stats["json-document"] += 1
                    try:
                        document = json.loads(value)
                    except ValueError:
                        self.report(
                            "type", path, "a string that starts like a JSON document but does not parse"
                        )
                        return
                    if isinstance(document, dict):
                        self._object_alternatives(document, objects, path)
                return
            self._type(value, alts, path)
        elif isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_asset_sig:
            # An asset as the engine writes it in a property map (and the mock runtime records it): {sig: asset
            # sig, "text" | "path" | "uri": ...}. Accepted where the SDK takes an Asset.
            if not any(isinstance(a, type) and issubclass(a, pulumi.Asset) for a in alts):
                self._type(value, alts, path)
            else:
                self.stats["asset"] += 1
        elif isinstance(value, dict):
            objects = [a for a in alts if isinstance(a, type) and pulumi_types.is_input_type(a)]
            mappings = [
                a for a in alts if typing.get_origin(a) in _MAPPINGS or a in (dict, collections.abc.Mapping)
            ]
            if objects:
                self._object_alternatives(value, objects, path)
            elif mappings:
                args = typing.get_args(mappings[0])
                if len(args) == 2:
                    for key, item in value.items():
                        self.value(item, args[1], f"{path}[{key!r}]")
            else:
                self._type(value, alts, path)
        elif isinstance(value, list | tuple):
            sequences = [a for a in alts if typing.get_origin(a) in _SEQUENCES or a in (list, tuple)]
            if not sequences:
                self._type(value, alts, path)
                return
            args = typing.get_args(sequences[0])
            if args:
                for i, item in enumerate(value):
                    self.value(item, args[0], f"{path}[{i}]")
        else:
            # Assets, archives, resource references: accepted when the SDK names their class.
            if not any(isinstance(a, type) and isinstance(value, a) for a in alts):
                self._type(value, alts, path)

    def _object_alternatives(self, value: dict, objects: list[type], path: str) -> None:
        """One *Args class, or a union of them (azure-native's discriminated unions): the value must satisfy
        one; when none does, report what the closest one says."""
        best: list[Violation] | None = None
        for cls in objects:
            sub = _Walker(self.token, self.provider)
            sub.object(value, cls, path)
            if not sub.violations:
                self.stats.update(sub.stats)
                return
            if best is None or len(sub.violations) < len(best):
                best = sub.violations
        self.violations.extend(best or [])

    def _type(self, value: Any, alts: list[Any], path: str) -> None:
        shown = (
            value
            if not isinstance(value, str | dict | list) or len(repr(value)) < 80
            else f"{repr(value)[:77]}..."
        )
        self.report(
            "type", path, f"{type(value).__name__} value {shown!r} where the SDK allows {_describe(alts)}"
        )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_resource(
    token: str, inputs: dict[str, Any], stats: collections.Counter[str] | None = None
) -> list[Violation]:
    """Every way `inputs` (engine names, plain values) departs from what the SDK defines for `token`.
    `stats`, when given, is updated with how many objects, properties, enum-typed values and JSON
    documents were looked at (so a test can tell the checks saw something)."""
    try:
        cls = args_class(token)
    except SdkLookupError as exc:
        return [Violation("unresolved", token, "", str(exc))]
    walker = _Walker(token, provider=token.startswith("pulumi:providers:"))
    walker.object(dict(inputs), cls, "")
    if stats is not None:
        stats.update(walker.stats)
    return walker.violations


def enum_properties(token: str) -> dict[str, list[str]]:
    """Engine property path -> enum class names, for every enum-typed input reachable from `token`'s Args
    (nested *Args classes followed; cycles cut). Tells which captured values the enum check looked at."""
    out: dict[str, list[str]] = {}
    seen: set[type] = set()

    def walk(cls: type, prefix: str) -> None:
        if cls in seen:
            return
        seen.add(cls)
        for key, hint in property_hints(cls).items():
            stack = [hint]
            while stack:
                for alt in alternatives(stack.pop()):
                    if _is_enum(alt):
                        out.setdefault(_join(prefix, key), []).append(alt.__name__)
                    elif isinstance(alt, type) and pulumi_types.is_input_type(alt):
                        walk(alt, _join(prefix, key))
                    elif typing.get_origin(alt) in _SEQUENCES + _MAPPINGS:
                        stack.append(typing.get_args(alt)[-1])
        seen.discard(cls)

    walk(args_class(token), "")
    return out


# --- A provider's own Pulumi package schema (schema.json), vendored in part -------------------------------
#
# A bridged provider's schema.json (pulumi-gcp: provider/cmd/pulumi-resource-gcp/schema.json in its
# repository, tens of MB) is what every SDK is generated from. The tests keep only the entries for the
# resource types the program declares, with the types they reference, under
# tests/fixtures/provider_schemas/<package>/resources.json:
#
#   {"provenance": {"source": ..., "version": ..., "path": ..., "commit": ..., "retrieved": ...},
#    "resources": {token: <schema.json resources[token]>, ...},
#    "types": {token: <schema.json types[token]>, ...}}
#
# `vendor_schema` writes that file from a full schema.json (see the __main__ block below).

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "provider_schemas"


@dataclass
class VendoredSchema:
    path: Path
    provenance: dict[str, Any]
    resources: dict[str, dict[str, Any]]
    types: dict[str, dict[str, Any]]


class SchemaFixtureError(ValueError):
    pass


PROVENANCE_KEYS = ("source", "version", "path")


def load_schema(path: Path) -> VendoredSchema:
    """Read a vendored schema part; raise FileNotFoundError when absent, SchemaFixtureError when malformed."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("resources"), dict):
        raise SchemaFixtureError(f"{path}: expected an object with 'resources' (and 'types', 'provenance')")
    provenance = data.get("provenance")
    if not isinstance(provenance, dict) or any(not provenance.get(k) for k in PROVENANCE_KEYS):
        raise SchemaFixtureError(f"{path}: 'provenance' must name {', '.join(PROVENANCE_KEYS)}")
    return VendoredSchema(path, provenance, data["resources"], data.get("types") or {})


def _ref_token(ref: str) -> str:
    return urllib.parse.unquote(ref.removeprefix("#/types/"))


def schema_refs(node: Any) -> Iterator[str]:
    """Every `#/types/...` token referenced anywhere under `node`."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/types/"):
            yield _ref_token(ref)
        for value in node.values():
            yield from schema_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from schema_refs(value)


def schema_subset(schema: dict[str, Any], tokens: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The resource entries for `tokens` and the closure of the types they reference."""
    resources = {}
    for token in sorted(set(tokens)):
        if token not in schema.get("resources", {}):
            raise SchemaFixtureError(f"the schema has no resource {token}")
        resources[token] = schema["resources"][token]
    types: dict[str, Any] = {}
    pending = [ref for entry in resources.values() for ref in schema_refs(entry)]
    while pending:
        ref = pending.pop()
        if ref in types:
            continue
        if ref not in schema.get("types", {}):
            raise SchemaFixtureError(f"the schema references a type it does not define: {ref}")
        types[ref] = schema["types"][ref]
        pending.extend(schema_refs(types[ref]))
    return resources, dict(sorted(types.items()))


class _SchemaWalker:
    def __init__(self, schema: VendoredSchema, token: str) -> None:
        self.schema = schema
        self.token = token
        self.violations: list[Violation] = []
        self.stats: collections.Counter[str] = collections.Counter()

    def report(self, kind: str, path: str, message: str) -> None:
        self.violations.append(Violation(kind, self.token, path, message))

    def object(
        self, value: dict, properties: dict[str, Any], required: Iterable[str], what: str, path: str
    ) -> None:
        self.stats["object"] += 1
        self.stats["property"] += len(value)
        for key in sorted(required):
            if value.get(key) is None:
                self.report(
                    "missing-required", _join(path, key), f"required input {key!r} of {what} is missing"
                )
        for key, item in value.items():
            if key not in properties:
                close = difflib.get_close_matches(key, list(properties), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.report(
                    "unknown-property",
                    _join(path, key),
                    f"{what} has no input {key!r}{hint} (it has: {', '.join(sorted(properties))})",
                )
                continue
            self.value(item, properties[key], _join(path, key))

    def value(self, value: Any, spec: dict[str, Any], path: str) -> None:
        if value is None:
            return
        if "oneOf" in spec:
            best: list[Violation] | None = None
            for alt in spec["oneOf"]:
                sub = _SchemaWalker(self.schema, self.token)
                sub.value(value, alt, path)
                if not sub.violations:
                    self.stats.update(sub.stats)
                    return
                if best is None or len(sub.violations) < len(best):
                    best = sub.violations
            self.violations.extend(best or [])
            return
        ref = spec.get("$ref")
        if isinstance(ref, str):
            if ref.startswith("pulumi.json#/"):
                return  # Any, Json, Asset, Archive: nothing the schema constrains further
            name = _ref_token(ref)
            target = self.schema.types.get(name)
            if target is None:
                self.report("unresolved", path, f"the vendored schema lacks type {name}; re-vendor it")
                return
            if "enum" in target:
                self._scalar(value, target, path)
                allowed = [e.get("value") for e in target["enum"]]
                self.stats["enum"] += 1
                if value not in allowed:
                    self.report(
                        "enum",
                        path,
                        f"{value!r} is not a member of {name}; allowed: {', '.join(map(repr, allowed))}",
                    )
                return
            if not isinstance(value, dict):
                self.report(
                    "type", path, f"{type(value).__name__} value where the schema has object type {name}"
                )
                return
            self.object(value, target.get("properties", {}), target.get("required", []), name, path)
            return
        kind = spec.get("type")
        if kind == "array":
            if not isinstance(value, list | tuple):
                self.report("type", path, f"{type(value).__name__} value where the schema has an array")
                return
            self._bounds(len(value), spec, "minItems", "maxItems", path, "items")
            for i, item in enumerate(value):
                self.value(item, spec.get("items", {}), f"{path}[{i}]")
        elif kind == "object":
            if not isinstance(value, dict):
                self.report("type", path, f"{type(value).__name__} value where the schema has a map")
                return
            for key, item in value.items():
                self.value(item, spec.get("additionalProperties", {}), f"{path}[{key!r}]")
        elif kind is not None:
            self._scalar(value, spec, path)
        if "enum" in spec:  # JSON-Schema style, should a schema carry one inline
            if value not in spec["enum"]:
                self.report("enum", path, f"{value!r} is not one of {spec['enum']}")

    def _scalar(self, value: Any, spec: dict[str, Any], path: str) -> None:
        kind = spec.get("type")
        ok = {
            "string": isinstance(value, str),
            "boolean": isinstance(value, bool),
            "integer": isinstance(value, int | float)
            and not isinstance(value, bool)
            and float(value).is_integer(),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
        }.get(kind, True)
        if not ok:
            self.report("type", path, f"{type(value).__name__} value {value!r} where the schema has {kind}")
            return
        if isinstance(value, str):
            pattern = spec.get("pattern")
            if pattern and not re.search(pattern, value):
                self.report("pattern", path, f"{value!r} does not match the schema's pattern {pattern!r}")
            self._bounds(len(value), spec, "minLength", "maxLength", path, "characters")
        elif kind in ("integer", "number"):
            self._bounds(value, spec, "minimum", "maximum", path, "")

    def _bounds(self, n: float, spec: dict[str, Any], low: str, high: str, path: str, unit: str) -> None:
        if low in spec and n < spec[low]:
            self.report(
                "constraint", path, f"{n} {unit} is under the schema's {low} {spec[low]}".replace("  ", " ")
            )
        if high in spec and n > spec[high]:
            self.report(
                "constraint", path, f"{n} {unit} is over the schema's {high} {spec[high]}".replace("  ", " ")
            )


def check_against_schema(
    schema: VendoredSchema, token: str, inputs: dict[str, Any], stats: collections.Counter[str] | None = None
) -> list[Violation]:
    """Every way `inputs` departs from the schema's `inputProperties` / `requiredInputs` for `token`."""
    entry = schema.resources.get(token)
    if entry is None:
        return [
            Violation("unresolved", token, "", f"{schema.path.name} has no resource {token}; re-vendor it")
        ]
    walker = _SchemaWalker(schema, token)
    walker.object(dict(inputs), entry.get("inputProperties", {}), entry.get("requiredInputs", []), token, "")
    if stats is not None:
        stats.update(walker.stats)
    return walker.violations


def declared_tokens(package: str) -> set[str]:
    """The custom resource type tokens of `package` the program declares, over every stack file."""
    from infra.mock_runtime import run_program
    from infra.stack_file import list_stack_files, read_stack_file

    repo = Path(__file__).resolve().parent.parent
    tokens = set()
    for path in list_stack_files(repo / "stacks"):
        stack = read_stack_file(path)
        run = run_program(stack.env, stack.config, enforce_rules=False)
        tokens |= {r.type for r in run.cloud_resources if r.type.split(":", 1)[0] == package}
    return tokens


def vendor_schema(full_schema: Path, out: Path, provenance: dict[str, Any], tokens: Iterable[str]) -> None:
    schema = json.loads(full_schema.read_text())
    resources, types = schema_subset(schema, tokens)
    record = {"provenance": provenance, "resources": resources, "types": types}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    # python -m tests.provider_sdk vendor gcp PATH/TO/schema.json --source URL --version 9.37.1 \
    #     [--path provider/cmd/pulumi-resource-gcp/schema.json] [--commit SHA]
    import argparse
    import datetime
    import importlib.metadata

    parser = argparse.ArgumentParser(prog="python -m tests.provider_sdk")
    sub = parser.add_subparsers(dest="command", required=True)
    vendor = sub.add_parser(
        "vendor", help="keep the schema entries for the resource types the program declares"
    )
    vendor.add_argument("package", help="pulumi package name: gcp, aws, azure-native")
    vendor.add_argument("schema", type=Path, help="the provider's full schema.json")
    vendor.add_argument("--source", required=True, help="where schema.json came from (a URL)")
    vendor.add_argument("--version", required=True, help="the provider release it belongs to, e.g. 9.37.1")
    vendor.add_argument("--path", default=None, help="its path in the provider's repository")
    vendor.add_argument("--commit", default=None)
    vendor.add_argument(
        "--out", type=Path, default=None, help="default: tests/fixtures/provider_schemas/PKG/resources.json"
    )
    ns = parser.parse_args()
    installed = importlib.metadata.version(sdk_module_name(ns.package))
    if ns.version != installed:
        parser.error(f"--version {ns.version} is not the installed {sdk_module_name(ns.package)} {installed}")
    record = {
        "source": ns.source,
        "version": ns.version,
        "path": ns.path or f"provider/cmd/pulumi-resource-{ns.package}/schema.json",
        "commit": ns.commit,
        "retrieved": datetime.date.today().isoformat(),
        "note": "only the resource types the program declares and the types they reference (tests/provider_sdk.py)",
    }
    target = ns.out or FIXTURES / ns.package / "resources.json"
    vendor_schema(ns.schema, target, record, declared_tokens(ns.package))
    print(f"wrote {target}")
