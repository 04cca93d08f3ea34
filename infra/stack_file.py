"""Read and write `stacks/Pulumi.<env>.yaml`: the `trainfleet:*` keys go through StackConfig, everything
else (provider keys such as `aws:region`, secrets, `encryptionsalt`) is carried through untouched."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.config import NAMESPACE, SECTIONS, StackConfig
from infra.errors import ConfigError, did_you_mean, shown
from infra.naming import STACK_NAME, check_stack_name
from infra.strict_yaml import load_yaml

PROJECT_FILE = "Pulumi.yaml"


@dataclass
class StackFile:
    path: Path
    config: StackConfig
    other_config: dict[str, Any] = field(default_factory=dict)  # non-trainfleet `config:` keys, as read
    other_top: dict[str, Any] = field(default_factory=dict)  # top-level keys beside `config:`

    @property
    def env(self) -> str:
        return stack_name(self.path)


def stack_name(path: Path) -> str:
    """stacks/Pulumi.prod.yaml -> prod"""
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml").removesuffix(".yml")


def find_project_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above `start` holding Pulumi.yaml."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    return None


def stacks_dir(start: Path | None = None) -> Path:
    """Where stack files live: the project's stackConfigDir, else ./stacks."""
    root = find_project_root(start)
    if root is None:
        return (start or Path.cwd()) / "stacks"
    try:
        project = load_yaml((root / PROJECT_FILE).read_text(), PROJECT_FILE) or {}
    except (OSError, UnicodeDecodeError, ConfigError):
        project = {}
    sub = project.get("stackConfigDir", ".") if isinstance(project, dict) else "."
    return root / str(sub)


# Pulumi's own rule for a stack name (pkg/backend: `^[A-Za-z0-9_.-]{1,100}$`), see
# https://www.pulumi.com/docs/iac/concepts/stacks/ : "Stack names may only contain alphanumeric characters,
# hyphens, underscores, or periods."
STACK_FILE_SUFFIXES = (".yaml", ".yml")


def stack_path(stack: str, start: Path | None = None) -> Path:
    """`prod` -> <project>/stacks/Pulumi.prod.yaml; a path ending in .yaml/.yml is used as it is.

    Anything else is refused with one line: an empty name, a name with characters Pulumi does not allow
    in a stack name, and a path (it has a `/`) that does not end in .yaml or .yml (so `../../x` never
    names an arbitrary file)."""
    if stack.endswith(STACK_FILE_SUFFIXES) and Path(stack).name not in STACK_FILE_SUFFIXES:
        return Path(stack)
    if "/" in stack or os.sep in stack:
        raise ConfigError(
            f"stack {shown(stack)} is a path that does not end in .yaml or .yml; "
            "name a stack (e.g. prod) or a stack file (e.g. stacks/Pulumi.prod.yaml)"
        )
    if not STACK_NAME.fullmatch(stack) or set(stack) == {"."}:
        raise ConfigError(
            f"stack name {shown(stack)} is not a Pulumi stack name; use 1-100 letters, digits, "
            "'-', '_' or '.' (e.g. prod), or a path ending in .yaml"
        )
    return stacks_dir(start) / f"Pulumi.{stack}.yaml"


def writable_stack_path(stack: str, start: Path | None = None) -> Path:
    """Where `plan --write-stack STACK` may write: this project's stacks folder, as Pulumi.<ENV>.yaml (the one
    file Pulumi reads as stack ENV), whether STACK names the stack or that file. A path anywhere else is refused
    with one line: no stack would be read from there, and the file is not trainfleet's to write."""
    path = stack_path(stack, start)
    folder = stacks_dir(start)
    name = stack_name(path)
    inside = path.parent.resolve() == folder.resolve() and path.name == f"Pulumi.{name}.yaml"
    if not (inside and STACK_NAME.fullmatch(name)):
        raise ConfigError(
            f"--write-stack {shown(stack)} is not a stack file of this project; plans are written to "
            f"{folder}/Pulumi.<ENV>.yaml: name the stack instead (e.g. --write-stack dev)"
        )
    return path


def list_stack_files(start: Path | None = None) -> list[Path]:
    return sorted(stacks_dir(start).glob("Pulumi.*.yaml"))


def parse_stack_text(text: str, where: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split a stack file into (trainfleet sections, other config keys, other top-level keys)."""
    document = load_yaml(text, where)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(f"{where}: expected a mapping with a `config:` key, got {type(document).__name__}")
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: `config:` must be a mapping of keys such as trainfleet:job")
    sections, other = {}, {}
    for key, value in config.items():
        namespace, _, name = str(key).partition(":")
        if namespace != NAMESPACE:
            other[key] = value
            continue
        if name not in SECTIONS:
            hint = did_you_mean(name, list(SECTIONS))
            raise ConfigError(f"{where}: {key} is not a known key{hint}; allowed: " + ", ".join(SECTIONS))
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise ConfigError(
                f"{where}: {key} is a secret; trainfleet settings are plain values, not secrets"
            )
        sections[name] = value
    top = {k: v for k, v in document.items() if k != "config"}
    return sections, other, top


def read_stack_file(path: Path, *, check_catalog: bool = True) -> StackFile:
    """Load and validate a stack file; any problem is one ConfigError line naming the file and key."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        have = ", ".join(stack_name(p) for p in sorted(path.parent.glob("Pulumi.*.yaml"))) or "none"
        raise ConfigError(f"stack file {path} does not exist; stacks here: {have}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"stack file {path} cannot be read ({exc})") from None
    check_stack_name(stack_name(path))  # it reaches node files and resource names: fail here, not mid-program
    sections, other, top = parse_stack_text(text, str(path))
    try:
        config = StackConfig.from_sections(sections, check_catalog=check_catalog)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return StackFile(path, config, other, top)


def render_stack_text(
    config: StackConfig, other_config: dict | None = None, other_top: dict | None = None
) -> str:
    document: dict[str, Any] = dict(other_top or {})
    config_keys: dict[str, Any] = dict(other_config or {})
    config_keys.update({f"{NAMESPACE}:{name}": value for name, value in config.to_sections().items()})
    document["config"] = config_keys
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)


def write_stack_file(
    path: Path, config: StackConfig, other_config: dict | None = None, other_top=None
) -> Path:
    """Write a whole stack file from `config` atomically (see infra/atomic.py): a crash never leaves half a
    stack file. To change an existing file, use `edit_stack_file`, which keeps what it does not own."""
    from infra.atomic import write_file

    write_file(path, render_stack_text(config, other_config, other_top), what="stack file", make_parents=True)
    return path


# ---- editing an existing stack file in place ----------------------------------------------------------

BACKUP_SUFFIX = ".bak"


def backup_path(path: Path) -> Path:
    """Where the previous version of a stack file is kept: Pulumi.prod.yaml -> Pulumi.prod.yaml.bak-<UTC time>
    (the suffix keeps it out of `Pulumi.*.yaml`, so neither Pulumi nor trainfleet reads it as a stack)."""
    from datetime import UTC, datetime

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}{BACKUP_SUFFIX}-{stamp}")
    n = 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.name}{BACKUP_SUFFIX}-{stamp}-{n}")
    return candidate


def _guess_indent(doc) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as the file itself writes them: measured from the first
    nested block mapping and the first block sequence under a mapping key (ruamel's own guess conflates
    the mapping and the sequence indent)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    mapping = sequence = offset = None
    todo = [doc]
    while todo and (mapping is None or sequence is None):
        node = todo.pop(0)
        if not isinstance(node, CommentedMap):
            if isinstance(node, CommentedSeq):
                todo.extend(node)
            continue
        for key, value in node.items():
            key_col = node.lc.key(key)[1]
            if isinstance(value, CommentedMap) and len(value) and not value.fa.flow_style() and mapping is None:
                mapping = value.lc.key(next(iter(value)))[1] - key_col
            if isinstance(value, CommentedSeq) and len(value) and not value.fa.flow_style() and sequence is None:
                item_line, item_col = value.lc.item(0)
                if item_line > node.lc.key(key)[0]:
                    sequence, offset = item_col - key_col, max(0, item_col - key_col - 2)
            todo.append(value)
    mapping = mapping if mapping and mapping > 0 else 2
    if sequence is None or sequence < 2:
        sequence, offset = mapping, 0
    return mapping, sequence, offset or 0


def _round_trip_yaml(text: str):
    """A ruamel.yaml round-trip loader/dumper set to the file's own indentation."""
    from ruamel.yaml import YAML

    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never fold a long line the user wrote on one line
    try:
        mapping, sequence, offset = _guess_indent(YAML(typ="rt").load(text))
    except Exception:  # noqa: BLE001 - only a guess; the load below reports a real problem
        mapping, sequence, offset = 2, 2, 0
    rt.indent(mapping=mapping, sequence=sequence, offset=offset)
    return rt


def _config_ranges(doc, n_lines: int) -> tuple[dict[str, tuple[int, int]], int] | None:
    """Line ranges [start, end) of each key under `config:` (a key's range runs to the next key), and the
    line where the config mapping ends; None when `config:` is not a block mapping."""
    from ruamel.yaml.comments import CommentedMap

    cfg = doc.get("config") if isinstance(doc, CommentedMap) else None
    if not isinstance(cfg, CommentedMap) or cfg.fa.flow_style() or not len(cfg):
        return None
    config_line = doc.lc.key("config")[0]
    after = sorted(doc.lc.key(k)[0] for k in doc if doc.lc.key(k)[0] > config_line)
    config_end = after[0] if after else n_lines
    keys = list(cfg)
    starts = [cfg.lc.key(k)[0] for k in keys]
    if starts != sorted(starts) or (starts and starts[0] <= config_line):
        return None
    ends = [*starts[1:], config_end]
    return {str(k): (a, b) for k, a, b in zip(keys, starts, ends, strict=True)}, config_end


def _splice(original: str, dumped: str, changed: set[str]) -> str | None:
    """The original text with only the `changed` config keys' lines taken from the ruamel dump; every other
    line (comments, secrets, other namespaces, other top-level keys) stays byte for byte. None when the
    layout is not one this can splice (then the caller uses the whole dump)."""
    from ruamel.yaml import YAML

    loader = YAML(typ="rt")
    old_lines = original.splitlines(keepends=True)
    new_lines = dumped.splitlines(keepends=True)
    if old_lines and old_lines[0].endswith("\r\n"):  # a Windows-edited file keeps its line ends
        new_lines = [line[:-1] + "\r\n" if line.endswith("\n") and not line.endswith("\r\n") else line
                     for line in new_lines]  # fmt: skip
    old = _config_ranges(loader.load(original), len(old_lines))
    new = _config_ranges(loader.load(dumped), len(new_lines))
    if old is None or new is None:
        return None
    (old_ranges, old_end), (new_ranges, _) = old, new
    if old_end == len(old_lines) and old_lines and not old_lines[-1].endswith("\n"):
        old_lines[-1] += "\n"  # config runs to the end of the file: what follows needs its own line
    out: list[str] = []
    cursor = 0
    for key, (start, end) in old_ranges.items():
        out.extend(old_lines[cursor:start])
        if key in changed:
            if key not in new_ranges:
                return None
            a, b = new_ranges[key]
            out.extend(new_lines[a:b])
        else:
            out.extend(old_lines[start:end])
        cursor = end
    if cursor != old_end:
        return None
    # Keys the edit added go at the end of the config mapping, before comments that lead into what follows.
    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    key_col = indent(old_lines[next(iter(old_ranges.values()))[0]])
    insert_at = len(out)
    while insert_at > 0 and (
        not out[insert_at - 1].strip()
        or (out[insert_at - 1].lstrip().startswith("#") and indent(out[insert_at - 1]) < key_col)
    ):
        insert_at -= 1
    added = [line for key in new_ranges if key not in old_ranges for line in new_lines[slice(*new_ranges[key])]]
    out[insert_at:insert_at] = added
    out.extend(old_lines[old_end:])
    return "".join(out)


def plain_data(value: Any) -> Any:
    """ruamel's round-trip types -> plain dict/list/scalars, for comparing two documents."""
    if isinstance(value, dict):
        return {str(k): plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_data(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def check_writable_stack(path: Path) -> None:
    """Before long work that ends in writing `path`: refuse a folder, a device, and an existing file that
    does not read as a stack file (so it is never replaced by one), each with one line."""
    if path.is_dir():
        raise ConfigError(f"stack file {path} is a directory; name a stack or a .yaml file")
    if not path.exists():
        return
    if not path.is_file():
        raise ConfigError(f"stack file {path} is not a regular file; name a stack or a .yaml file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"stack file {path} cannot be read ({exc}); fix it or write another stack") from None
    parse_stack_text(text, str(path))


def _comments(text: str):
    """Every comment in the text, whole-line and trailing (`key: value  # why`), counted."""
    from collections import Counter

    return Counter(c for c in map(_comment_of, text.splitlines()) if c)


def _comment_of(line: str) -> str:
    """The comment on a YAML line: a `#` at the start or after a space, outside quotes; '' if none."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[i:].strip()
    return ""


def _same_document(a: str, b: str) -> bool:
    try:
        return yaml.safe_load(a) == yaml.safe_load(b)
    except (yaml.YAMLError, RecursionError):
        return False


@dataclass
class EditResult:
    path: Path  # the file written (the end of a symlink)
    backup: Path | None  # the previous version, kept beside it
    notes: list[str] = field(default_factory=list)


def edit_stack_file(path: Path, edit, *, check_catalog: bool = True) -> EditResult:
    """Change an existing stack file in place and keep everything `edit` does not touch, byte for byte.

    `edit(config)` gets the round-trip (ruamel.yaml) mapping under `config:` and changes it in place,
    returning notes for the user. Only the config keys whose values changed are re-rendered; comments,
    `secure:` values, `encryptionsalt`, other namespaces and untouched sections keep their exact lines.
    The result must validate with StackConfig before anything is written; the previous file is kept as
    `<name>.bak-<UTC time>` beside the real file, and the new one keeps the file's permission bits. A symlinked
    stack file stays a link: the file it points to is what changes."""
    import io

    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError as RuamelError

    from infra.atomic import resolve_target, write_file

    target = resolve_target(path)
    try:
        original = target.read_bytes()
        text = original.decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"stack file {path} cannot be read ({exc}); fix it or write another stack") from None
    parse_stack_text(text, str(path))  # duplicate keys, depth, syntax: refused before ruamel sees it
    rt = _round_trip_yaml(text)
    try:
        doc = rt.load(text)
    except (RuamelError, RecursionError) as exc:
        raise ConfigError(f"stack file {path} cannot be edited ({' '.join(str(exc).split())})") from None
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise ConfigError(f"{path}: expected a mapping with a `config:` key; fix the file")
    if "config" not in doc or doc["config"] is None:
        doc["config"] = CommentedMap()
    config = doc["config"]
    if not isinstance(config, CommentedMap):
        raise ConfigError(f"{path}: `config:` must be a mapping of keys such as trainfleet:job")
    before = {str(k): plain_data(v) for k, v in config.items()}
    notes = list(edit(config) or [])
    after = {str(k): plain_data(v) for k, v in config.items()}
    changed = {k for k in after if before.get(k) != after[k]}
    if set(before) - set(after):
        raise ConfigError(f"{path}: an edit may not remove config keys")  # never: the planner only sets
    buf = io.StringIO()
    rt.dump(doc, buf)
    dumped = buf.getvalue()
    result = _splice(text, dumped, changed) if text.strip() else None
    if result is not None and (not _same_document(result, dumped) or _comments(text) - _comments(result)):
        result = None  # the splice changed a value or lost a comment line: never ship that
    if result is None:
        result = dumped  # a layout the splice does not handle: the full round-trip dump (comments kept)
    sections, _, _ = parse_stack_text(result, str(path))
    try:
        StackConfig.from_sections(sections, check_catalog=check_catalog)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}; nothing was written") from None
    if result.encode() == original:
        return EditResult(target, None, notes)
    backup = backup_path(target)
    mode = target.stat().st_mode & 0o7777
    write_file(backup, original, what="backup of the stack file", mode=mode)
    try:
        write_file(target, result, what="stack file")
    except BaseException:
        backup.unlink(missing_ok=True)
        raise
    return EditResult(target, backup, notes)
