"""Evaluate an Azure role-assignment condition (ABAC, version 2.0) for one storage request.

The subset trainfleet writes: `ActionMatches{'...'}`, `SubOperationMatches{'...'}`, `@Resource[...]` and
`@Request[...]` attributes compared with StringEquals / StringStartsWith / StringLike, `!`/`NOT`, `AND`,
`OR` and parentheses, evaluated left to right with short-circuiting, as described in
https://learn.microsoft.com/azure/role-based-access-control/conditions-format. An attribute the request
does not carry (a blob path on List Blobs:
https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#list-blobs) cannot be
evaluated, and the request is denied.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"\s*(?:(?P<paren>[()])|(?P<not>!|NOT\b)|(?P<and>AND\b)|(?P<or>OR\b)"
    r"|(?P<func>ActionMatches|SubOperationMatches)\{'(?P<arg>[^']*)'\}"
    r"|(?P<attr>@(?:Resource|Request|Principal|Environment)\[[^\]]+\])"
    r"|(?P<op>StringEquals|StringStartsWith|StringLike|StringNotEquals)\b"
    r"|'(?P<value>[^']*)')"
)


class ConditionSyntaxError(ValueError):
    pass


class NotEvaluable(Exception):
    """The condition needs an attribute the request does not carry."""


@dataclass
class Request:
    action: str
    suboperation: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)  # e.g. "@Resource[...blobs:path]": "a/b"


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ConditionSyntaxError(f"cannot read the condition at {text[pos:pos + 40]!r}")
        kind = m.lastgroup or ""
        if m.group("func"):
            out.append(("func", f"{m.group('func')}|{m.group('arg')}"))
        else:
            out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _compare(op: str, actual: str, expected: str) -> bool:
    if op == "StringEquals":
        return actual == expected
    if op == "StringNotEquals":
        return actual != expected
    if op == "StringStartsWith":
        return actual.startswith(expected)
    return fnmatch.fnmatchcase(actual, expected)  # StringLike: * and ? wildcards


class _Parser:
    def __init__(self, text: str, request: Request):
        self.tokens, self.i, self.request = _tokens(text), 0, request

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def at(self, kind: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == kind

    def take(self, kind: str) -> str:
        token = self.peek()
        if token is None or token[0] != kind:
            raise ConditionSyntaxError(f"expected {kind}, found {token}")
        self.i += 1
        return token[1]

    # Each parse_* returns a thunk so that short-circuiting skips what need not be evaluated.
    def parse_or(self):
        parts = [self.parse_and()]
        while self.at("or"):
            self.i += 1
            parts.append(self.parse_and())
        return lambda: any(p() for p in parts)

    def parse_and(self):
        parts = [self.parse_unary()]
        while self.at("and"):
            self.i += 1
            parts.append(self.parse_unary())
        return lambda: all(p() for p in parts)

    def parse_unary(self):
        if self.at("not"):
            self.i += 1
            inner = self.parse_unary()
            return lambda: not inner()
        return self.parse_primary()

    def parse_primary(self):
        token = self.peek()
        if token is None:
            raise ConditionSyntaxError("the condition ends too early")
        if token == ("paren", "("):
            self.i += 1
            inner = self.parse_or()
            self.take("paren")
            return inner
        if token[0] == "func":
            self.i += 1
            name, arg = token[1].split("|", 1)
            request = self.request
            if name == "ActionMatches":
                return lambda: fnmatch.fnmatchcase(request.action, arg)
            return lambda: request.suboperation is not None and fnmatch.fnmatchcase(request.suboperation, arg)
        if token[0] == "attr":
            self.i += 1
            attr, op, value = token[1], self.take("op"), self.take("value")
            request = self.request

            def compare() -> bool:
                if attr not in request.attributes:
                    raise NotEvaluable(attr)
                return _compare(op, request.attributes[attr], value)

            return compare
        raise ConditionSyntaxError(f"unexpected {token[1]!r}")


def allows(condition: str, request: Request) -> bool:
    """Whether a role assignment with `condition` grants `request` (the role itself must grant the action)."""
    parser = _Parser(condition, request)
    evaluate = parser.parse_or()
    leftover = parser.peek()
    if leftover is not None:
        raise ConditionSyntaxError(f"unexpected {leftover[1]!r} after the condition")
    try:
        return evaluate()
    except NotEvaluable:
        return False


def blob_attributes(path: str | None = None, list_prefix: str | None = None) -> dict[str, str]:
    """The attributes a blob request carries: a path for one-blob operations, a prefix for List Blobs."""
    base = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
    out = {}
    if path is not None:
        out[f"@Resource[{base}:path]"] = path
    if list_prefix is not None:
        out[f"@Request[{base}:prefix]"] = list_prefix
    return out
