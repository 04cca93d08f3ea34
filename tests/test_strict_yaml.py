"""infra/strict_yaml.py: the YAML loader of every file trainfleet reads, on libyaml's parser (the default) and on
PyYAML's Python one (its fallback): both read the repo's stack files as PyYAML's SafeLoader does, and refuse the
same hostile files with the same line. Expected lines worked by hand from each document."""

from __future__ import annotations

import pytest
import yaml

from infra.errors import ConfigError
from infra.strict_yaml import LOADERS, load_yaml
from tests.conftest import REPO

STACK_FILES = sorted((REPO / "stacks").glob("Pulumi.*.yaml")) + [REPO / "Pulumi.yaml"]


def test_both_parsers_are_here():
    # PyYAML's wheels bundle libyaml; without it the default is the Python parser and this file tests it twice.
    assert sorted(LOADERS) == ["libyaml", "python"]


@pytest.mark.parametrize("parser", sorted(LOADERS))
def test_every_file_in_the_repo_reads_as_safe_load_reads_it(parser):
    for path in STACK_FILES:
        text = path.read_text()
        assert load_yaml(text, path.name, LOADERS[parser]) == yaml.safe_load(text), path.name


def nested_mapping(levels: int) -> str:
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(levels)) + f"{'  ' * levels}leaf: 1\n"


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


HOSTILE = {
    # line 1: 65 flow sequences deep; the 65th opens on line 1
    "flow-65": ("x: " + "[" * 65 + "]" * 65 + "\n", "f line 1: nested more than 64 levels deep"),
    # 5,000 deep: libyaml stops at its own limit (1,000) while scanning; the Python parser at 64 while composing
    "flow-5000": ("x: " + "[" * 5000 + "]" * 5000 + "\n", "f line 1: nested more than 64 levels deep"),
    # the document's mapping is level 1 and holds k0 (level 2), k0's mapping level 2 holds k1 (level 3), ...: k63,
    # on line 64, is level 65
    "block-64": (nested_mapping(64), "f line 64: nested more than 64 levels deep"),
    # a0 (line 1) is 1 + 9 values, a1 is 1 + 9 x 10 = 91, then 820, 7,381, 66,430 (a4), 597,871 (a5, line 6)
    "billion-laughs": (billion_laughs(), "f line 6: aliases expand it past 100,000 values"),
    "self-reference": ("a: 1\nloop: &loop [1, *loop]\n", "f line 2: an alias refers to the anchor it is inside of"),
    "duplicate-key": ("a: 1\nb: 2\nb: 3\n", "f line 3: key 'b' appears twice in the same mapping"),
    "unclosed-flow": ("a: [1\n", "f line 2: "),
    "tab-indent": ("a:\n\tb: 1\n", "f line 2: "),
    "undefined-alias": ("a: *nothing\n", "f line 1: found undefined alias 'nothing'; fix the YAML syntax"),
}


@pytest.mark.parametrize("parser", sorted(LOADERS))
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_file_is_one_line_naming_its_line(parser, case):
    text, says = HOSTILE[case]
    with pytest.raises(ConfigError) as info:
        load_yaml(text, "f", LOADERS[parser])
    message = str(info.value)
    assert message.startswith(says) and "\n" not in message, message


@pytest.mark.parametrize("parser", sorted(LOADERS))
def test_merge_keys_and_anchors_within_bounds_still_read(parser):
    text = "base: &b {x: 1, y: [1, 2]}\nc:\n  <<: *b\n  x: 2\nd: *b\n"
    assert load_yaml(text, "f", LOADERS[parser]) == {
        "base": {"x": 1, "y": [1, 2]}, "c": {"x": 2, "y": [1, 2]}, "d": {"x": 1, "y": [1, 2]}}  # fmt: skip
