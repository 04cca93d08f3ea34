"""YAML that trainfleet reads (stack files, Pulumi.yaml, usage files), held to what such a file can be: a key
given twice, absurd nesting and alias bombs are one ConfigError line naming the file and the line.

Scanning and parsing run in libyaml (PyYAML's C parser, in PyYAML's wheels): about six times faster than PyYAML's
Python scanner on a stack file (0.3 ms against 1.9 ms), and it stops flow nesting at 1,000 levels, where that
scanner is quadratic in it (a 2,000-deep `[[[...`: 1 ms against 0.9 s). Composing and constructing stay in Python, where the checks below hook in. A PyYAML built
without libyaml falls back to its Python scanner and parser, with the same checks and messages.
"""

from __future__ import annotations

from typing import Any, cast

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from infra.errors import ConfigError, shown


class PythonParser(Reader, Scanner, Parser):
    """PyYAML's own scanner and parser (what SafeLoader uses), as a parser base like CParser."""

    def __init__(self, stream):  # noqa: ANN001 - PyYAML's signature
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


# A stack file is a few levels deep (config > section > fleet > network > subnets); far deeper is a
# broken or hostile file, refused before anything recurses over it.
MAX_DEPTH = 64
# ... and a few hundred values; aliases (`*name`) repeat what an anchor holds, so a few lines can stand for
# billions of values ("billion laughs"). The document as aliases expand it may hold this many at most.
MAX_EXPANDED_NODES = 100_000
# libyaml refuses flow nesting past its own limit (1,000) while scanning, before the composer sees depth 64.
LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"


class AliasBombError(yaml.YAMLError):
    def __init__(self, reason: str, line: int):
        super().__init__(reason)
        self.reason, self.line = reason, line


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, line: int):
        super().__init__(f"key {key!r} appears twice")
        self.key, self.line = key, line


class TooDeepError(yaml.YAMLError):
    def __init__(self, line: int):
        super().__init__(f"nested more than {MAX_DEPTH} levels deep")
        self.line = line


def _expanded_size(root: yaml.Node) -> int:
    """How many nodes the document holds once every alias is expanded; AliasBombError past MAX_EXPANDED_NODES
    or for an alias inside its own anchor (a structure that never ends). A node many aliases share is sized once
    and counted each time it appears."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise AliasBombError("an alias refers to the anchor it is inside of", node.start_mark.line + 1)
        open_nodes.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])  # fmt: skip
        total = 1 + sum(size(child) for child in children)
        open_nodes.discard(key)
        if total > MAX_EXPANDED_NODES:
            raise AliasBombError(f"aliases expand it past {MAX_EXPANDED_NODES:,} values", node.start_mark.line + 1)
        sizes[key] = total
        return total

    return size(root)


class _StrictComposer(Composer):
    """PyYAML's composer, refusing nesting deeper than MAX_DEPTH and aliases that expand past MAX_EXPANDED_NODES."""

    def compose_document(self):  # noqa: ANN201 - PyYAML's signature
        node = super().compose_document()
        if node is not None:
            _expanded_size(node)
        return node

    def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                mark = cast(Any, self).peek_event().start_mark  # the parser's, mixed in beside
                raise TooDeepError(mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _StrictConstructor(SafeConstructor):
    """SafeConstructor that refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node, deep=False):  # noqa: ANN001
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` then overriding keys is fine
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise DuplicateKeyError(key, key_node.start_mark.line + 1)
                    seen[key] = key_node.start_mark.line + 1
                except TypeError:  # an unhashable key: PyYAML's own error says so below
                    break
        return super().construct_mapping(node, deep)


class _Strict(_StrictComposer, _StrictConstructor, Resolver):
    """The strict composer and constructor; a loader puts a parser after them (the composer must come first:
    CParser has a composer of its own, in C, without the checks)."""

    def _init_strict(self) -> None:
        _StrictComposer.__init__(self)
        _StrictConstructor.__init__(self)
        Resolver.__init__(self)


class PythonLoader(_Strict, PythonParser):
    def __init__(self, stream):  # noqa: ANN001 - PyYAML's signature
        PythonParser.__init__(self, stream)
        self._init_strict()


LOADERS: dict[str, type] = {"python": PythonLoader}

try:
    from yaml._yaml import CParser  # libyaml's scanner and parser (what yaml.CSafeLoader is built on)
except ImportError:  # a PyYAML built without libyaml
    pass
else:

    class LibyamlLoader(_Strict, CParser):
        def __init__(self, stream):  # noqa: ANN001 - PyYAML's signature
            CParser.__init__(self, stream)
            self._init_strict()

    LOADERS["libyaml"] = LibyamlLoader

_LOADER = LOADERS.get("libyaml", PythonLoader)


def load_yaml(text: str, where: str, loader: type = _LOADER) -> Any:
    """YAML from a file trainfleet reads: syntax errors, a key given twice and absurd nesting are one
    ConfigError line naming the file and the line."""
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - SafeConstructor: plain data only
    except DuplicateKeyError as exc:
        raise ConfigError(
            f"{where} line {exc.line}: key {shown(exc.key)} appears twice in the same mapping "
            "(YAML would silently keep only the last); keep one"
        ) from None
    except AliasBombError as exc:
        raise ConfigError(
            f"{where} line {exc.line}: {exc.reason}; trainfleet's files hold a few hundred values, write them out "
            "instead of through anchors and aliases"
        ) from None
    except TooDeepError as exc:
        raise _too_deep(where, exc.line) from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to read; fix the file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        if problem == LIBYAML_TOO_DEEP:
            raise _too_deep(where, mark.line + 1 if mark else 1) from None
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{where}{line}: {problem}; fix the YAML syntax") from None


def _too_deep(where: str, line: int) -> ConfigError:
    return ConfigError(
        f"{where} line {line}: nested more than {MAX_DEPTH} levels deep; trainfleet's files are a few "
        "levels deep, fix the file"
    )
