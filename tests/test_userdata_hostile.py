"""Hostile values for every field that reaches user-data. For each one, either the schema refuses it with one
ConfigError line naming the key, or it is rendered and, read back by real bash (`set -a; . trainfleet.env`,
the launch script run with a stand-in `deepspeed` that records its argv) and by a reader that follows
systemd's EnvironmentFile rules, no canary command runs and the value comes back exactly as given.

systemd reads trainfleet.env as an EnvironmentFile= (systemd.exec(5)): "a '-quoted value ... can span
multiple lines and contain any character verbatim other than single quote ... No backslash-escape sequences
are recognized"; a "-quoted value recognizes \\" \\\\ \\` \\$; an unquoted value takes backslash escapes and
keeps quotes after its first character. `systemd_environment_file` below follows those rules as the state
machine of systemd's src/basic/env-file.c (parse_env_file_internal) implements them; systemd itself is not
here to ask (no systemd-analyze / systemd-run in the test image).
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.config import StackConfig
from infra.errors import ConfigError, TrainfleetError
from infra.naming import check_stack_name
from infra.userdata import render_fleets, render_user_data, shq, templates_root
from tests.conftest import STACKS, assert_one_line_error, run_trainfleet
from tests.needs import need_tool

CANARY = "PWNED"
# Each would run `touch PWNED` (or change meaning) if it reached a shell unquoted, or end a line early.
HOSTILE = [
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"; touch {CANARY}",
    f"x && touch {CANARY}",
    f"x | touch {CANARY}",
    f"x\ntouch {CANARY}",
    f"x\rtouch {CANARY}",
    f"' ; touch {CANARY} ; '",
    f'" ; touch {CANARY} ; "',
    f"\\'; touch {CANARY} #",
    f"$(touch {CANARY})'\"`touch {CANARY}`\"'",
    "'",
    '"',
    "\\",
    "\\n",
    "a b  c",
    " leading and trailing ",
    "$HOME",
    "${HOME}",
    "%n %i",
    "*",
    "~",
    "!!",
    "#not a comment",
    "x=y",
    "-rf",
    "",
    "ü ☃ 😀",
    "a\tb",
    "nul\x00byte",
    "x" * 5000,
    "\u2028",
]
IDS = [f"v{i}" for i in range(len(HOSTILE))]

NODE_HOME, NODE_ETC, NODE_STATE = "/opt/trainfleet", "/etc/trainfleet", "/var/lib/trainfleet"

BASE = {
    "job": {"name": "hj", "params": "1B", "tokens": "1B"},
    "fleets": [{"name": "hf", "cloud": "aws", "region": "us-east-1", "instance_type": "g5.12xlarge", "nodes": 2}],
}
FLEETS = {
    "aws": BASE["fleets"][0],
    "gcp": {"name": "hf", "cloud": "gcp", "region": "us-central1", "instance_type": "a2-highgpu-1g", "nodes": 2},
    "azure": {"name": "hf", "cloud": "azure", "region": "eastus", "instance_type": "Standard_NC24ads_A100_v4",
              "nodes": 2},
}  # fmt: skip


def _set(sections: dict, where: str, value) -> None:
    """Put `value` at `where` ('launch.args', 'fleets[0].zones', ...) in the sections."""
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", where)
    node = sections
    for part, nxt in zip(parts, parts[1:] + [None], strict=True):
        key = int(part[1:-1]) if part.startswith("[") else part
        if nxt is None:
            node[key] = value
        else:
            if isinstance(node, dict) and key not in node:
                node[key] = {}
            node = node[key]


# field -> (key path the error must name, how the value goes in). Every field that reaches user-data, and the
# ones that must not reach it at all (image, tags, network, zones, fallback types, recipients).
FIELDS = {
    "launch.script": ("trainfleet:launch.script", lambda v: ("launch.script", v)),
    "launch.args": ("trainfleet:launch.args", lambda v: ("launch.args", ["--note", v])),
    "job.name": ("trainfleet:job.name", lambda v: ("job.name", v)),
    "fleets.name": ("trainfleet:fleets[0].name", lambda v: ("fleets[0].name", v)),
    "fleets.region": ("trainfleet:fleets[0].region", lambda v: ("fleets[0].region", v)),
    "fleets.zones": ("trainfleet:fleets[0].zones", lambda v: ("fleets[0].zones", [v])),
    "fleets.instance_type": ("trainfleet:fleets[0].instance_type", lambda v: ("fleets[0].instance_type", v)),
    "fleets.fallback_instance_types": (
        "trainfleet:fleets[0].fallback_instance_types",
        lambda v: ("fleets[0].fallback_instance_types", [v]),
    ),
    "fleets.image": ("trainfleet:fleets[0].image", lambda v: ("fleets[0].image", v)),
    "fleets.network": ("trainfleet:fleets[0].network", lambda v: ("fleets[0].network", {"name": v})),
    "checkpoint.bucket_name": ("trainfleet:checkpoint.bucket_name", lambda v: ("checkpoint.bucket_name", v)),
    "tags.value": ("trainfleet:tags", lambda v: ("tags", {"team": v})),
    "tags.key": ("trainfleet:tags", lambda v: ("tags", {v: "x"})),
    "budget.recipients": (
        "trainfleet:budget",
        lambda v: ("budget", {"monthly_limit_usd": 100, "recipients": [v]}),
    ),
}
# Fields that never reach user-data: a value they accept must leave the rendered document unchanged.
NOT_IN_USER_DATA = {
    "fleets.zones", "fleets.fallback_instance_types", "fleets.image", "fleets.network", "tags.value", "tags.key",
    "budget.recipients",
}  # fmt: skip


def sections_with(field: str, value, cloud: str = "aws") -> dict:
    sections = copy.deepcopy(BASE)
    sections["fleets"] = [copy.deepcopy(FLEETS[cloud])]
    where, v = FIELDS[field][1](value)
    _set(sections, where, v)
    return sections


# ---------------------------------------------------------------- the two readers of trainfleet.env


def systemd_environment_file(text: str) -> dict[str, str]:
    """KEY -> value as systemd reads an EnvironmentFile= (systemd.exec(5), src/basic/env-file.c)."""
    whitespace, newline, comments, dq_escapes = " \t\n\r", "\n\r", "#;", '"\\`$'
    out: dict[str, str] = {}
    state, key, value = "PRE_KEY", [], []
    last_key_ws = last_value_ws = None

    def push(strip_value: bool) -> None:
        k = key[:last_key_ws] if last_key_ws is not None else key
        v = value[:last_value_ws] if strip_value and last_value_ws is not None else value
        out["".join(k)] = "".join(v)

    for c in text:
        if state == "PRE_KEY":
            if c in comments:
                state = "COMMENT"
            elif c not in whitespace:
                state, key, last_key_ws = "KEY", [c], None
        elif state == "KEY":
            if c in newline:
                state, key = "PRE_KEY", []
            elif c == "=":
                state, value, last_value_ws = "PRE_VALUE", [], None
            else:
                if c not in whitespace:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key.append(c)
        elif state == "PRE_VALUE":
            if c in newline:
                push(False)
                state, key = "PRE_KEY", []
            elif c == "'":
                state = "SINGLE_QUOTE_VALUE"
            elif c == '"':
                state = "DOUBLE_QUOTE_VALUE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in whitespace:
                state = "VALUE"
                value.append(c)
        elif state == "VALUE":
            if c in newline:
                push(True)
                state, key = "PRE_KEY", []
            elif c == "\\":
                state, last_value_ws = "VALUE_ESCAPE", None
            else:
                if c not in whitespace:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in newline:  # an escaped newline is a continuation line: eaten
                value.append(c)
        elif state == "SINGLE_QUOTE_VALUE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_QUOTE_VALUE_ESCAPE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE_ESCAPE":
            state = "DOUBLE_QUOTE_VALUE"
            if c in dq_escapes:
                value.append(c)
            elif c != "\n":
                value += ["\\", c]
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in newline:
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":
            state = "PRE_KEY" if c in newline else "COMMENT"
    if state not in ("PRE_KEY", "KEY", "COMMENT", "COMMENT_ESCAPE"):
        push(state == "VALUE")
    return out


def test_the_systemd_reader_follows_the_documented_rules():
    text = (
        "# comment\n; comment too\nPLAIN=a b  \nSQ='a \"b\" \\n $x'\nDQ=\"a \\\"b\\\" \\\\ \\$x \\n\"\n"
        "JOINED='it'\"'\"'s'\nINNER=a'b'\nESC=a\\ b\\\\\nEMPTY=\nQEMPTY=''\nSPACED =  'x'  \n"
        "MULTI='line1\nline2'\n"
    )
    assert systemd_environment_file(text) == {
        "PLAIN": "a b",  # trailing whitespace dropped, interior kept
        "SQ": 'a "b" \\n $x',  # verbatim
        "DQ": 'a "b" \\ $x \\n',  # \" \\ \$ unescaped, other backslashes kept
        "JOINED": "it's",
        "INNER": "a'b'",  # quotes after the first character are kept
        "ESC": "a b\\",
        "EMPTY": "",
        "QEMPTY": "",
        "SPACED": "x",
        "MULTI": "line1\nline2",
    }


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C.UTF-8", **extra}


def no_canary(tmp_path: Path) -> None:
    found = list(tmp_path.rglob(f"*{CANARY}*"))
    assert not found, f"a hostile value ran a command: {found}"


def bash_environment_file(text: str, tmp_path: Path) -> dict[str, str]:
    """KEY -> value after `set -a; . FILE` in a real bash (the way the node scripts read it)."""
    need_tool("bash")
    f = tmp_path / "sourced.env"
    f.write_text(text, encoding="utf-8")
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", 'set -a; . "$1"; env -0', "bash", str(f)],
        capture_output=True,
        cwd=tmp_path,
        env=clean_env(tmp_path),
        timeout=30,
    )
    assert result.returncode == 0, result.stderr.decode()
    pairs = (item.split("=", 1) for item in result.stdout.decode().split("\0") if "=" in item)
    return dict(pairs)


def moved(text: str, tmp_path: Path) -> str:
    """Node paths moved under tmp_path (as tests/test_e2e_deepspeed.py lays a node out)."""
    return (
        text.replace(NODE_HOME, str(tmp_path / "opt"))
        .replace(NODE_ETC, str(tmp_path / "etc"))
        .replace(NODE_STATE, str(tmp_path / "state"))
    )


def run_launch(rendered, tmp_path: Path) -> list[str]:
    """The rendered trainfleet-launch.sh, run by bash with a stand-in `deepspeed` that records its argv."""
    for d in ("opt", "etc", "state", "bin"):
        (tmp_path / d).mkdir(exist_ok=True)
    env_file = tmp_path / "etc" / "trainfleet.env"
    env_file.write_text(moved(rendered.parts["trainfleet.env"], tmp_path), encoding="utf-8")
    (tmp_path / "etc" / "ds_config.json").write_text(rendered.parts["ds_config.json"])
    launch = tmp_path / "opt" / "trainfleet-launch.sh"
    launch.write_text(moved(rendered.parts["trainfleet-launch.sh"], tmp_path), encoding="utf-8")
    launch.chmod(0o755)
    fake = tmp_path / "bin" / "deepspeed"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "open(os.environ['ARGV_OUT'], 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "argv.json"
    env = clean_env(tmp_path, TRAINFLEET_ENV_FILE=str(env_file), ARGV_OUT=str(out))
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        ["bash", str(launch), str(tmp_path / "hostfile"), "0", "127.0.0.1"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())


def expected_env(stack: str, config: StackConfig, bucket: str, group: str) -> dict[str, str]:
    fleet = config.fleets[0]
    return {
        "TRAINFLEET_STACK": stack,
        "TRAINFLEET_JOB": config.job.name,
        "TRAINFLEET_FLEET": fleet.name,
        "TRAINFLEET_CLOUD": fleet.cloud,
        "TRAINFLEET_REGION": fleet.region,
        "TRAINFLEET_BUCKET": bucket,
        "TRAINFLEET_GROUP": group,
        "TRAINFLEET_NODES": str(fleet.nodes),
        "TRAINFLEET_SCRIPT": f"{NODE_HOME}/{config.launch.script}",
        "TRAINFLEET_MASTER_PORT": str(config.launch.master_port),
        "TRAINFLEET_HOME": NODE_HOME,
        "TRAINFLEET_CKPT_DIR": f"{NODE_STATE}/checkpoints",
    }


def check_node(stack: str, config: StackConfig, tmp_path: Path, bucket: str = "b-1", group: str = "g-1"):
    """Render the first fleet; both readers agree on trainfleet.env and give back every value exactly; the
    launch script hands DeepSpeed the script and each launch.args element as one argv element; nothing ran."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    r = render_user_data(stack, config, config.fleets[0], bucket=bucket, group=group)
    env_text = r.parts["trainfleet.env"]
    assert not any(line.endswith("\\") for line in env_text.splitlines()), "a continuation line"
    by_systemd = systemd_environment_file(env_text)
    by_bash = bash_environment_file(env_text, tmp_path)
    assert {k: by_bash.get(k) for k in by_systemd} == by_systemd
    expected = expected_env(stack, config, bucket, group)
    assert {k: by_systemd.get(k) for k in expected} == expected
    argv = run_launch(r, tmp_path)
    script = str(tmp_path / "opt" / config.launch.script)
    tail = [script, "--deepspeed_config", str(tmp_path / "state" / "run" / "ds_config.json"), *config.launch.args]
    assert argv[-len(tail) :] == tail
    no_canary(tmp_path)
    return r


# ---------------------------------------------------------------- every field x every hostile value


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_hostile_value_is_refused_by_the_schema_or_reaches_the_node_exactly(field, value, tmp_path):
    key = FIELDS[field][0]
    try:
        config = StackConfig.from_sections(sections_with(field, value))
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and "\r" not in message, message
        assert message.startswith(key), (key, message)
        return
    if field in NOT_IN_USER_DATA:
        plain = StackConfig.from_sections(sections_with("job.name", "hj"))
        ours = render_user_data("hs", config, config.fleets[0], bucket="b-1", group="g-1")
        theirs = render_user_data("hs", plain, plain.fleets[0], bucket="b-1", group="g-1")
        assert ours.document == theirs.document and ours.assets == theirs.assets, f"{field} reached user-data"
        return
    check_node("hs", config, tmp_path)


def test_launch_args_reach_deepspeed_as_given_on_every_cloud(tmp_path):
    args = [v for v in HOSTILE if not re.search("[\x00-\x1f\u2028]", v) and len(v) <= 4096]
    assert len(args) > 20
    for cloud in FLEETS:
        config = StackConfig.from_sections({**sections_with("launch.args", "x", cloud), "launch": {"args": args}})
        assert config.launch.args == args
        check_node("hs", config, tmp_path / cloud)


def test_the_hostile_report_values_are_refused_for_the_script():
    """The issue's reproducer and its variants: none of them gets near the node's shell."""
    for script in ["x.py; touch P", "$(touch P).py", "`touch P`.py", "x.py\ntouch P", "a b.py", "it's.py",
                   'a"b.py', "a\\b.py", "$HOME/x.py", "../x.py", "a/../../x.py", "/abs/x.py", "-x.py", ""]:  # fmt: skip
        with pytest.raises(ConfigError, match=r"^trainfleet:launch\.script"):
            StackConfig.from_sections(sections_with("launch.script", script))


def test_safe_scripts_and_odd_but_valid_names_read_back_exactly(tmp_path):
    config = StackConfig.from_sections(
        {**sections_with("checkpoint.bucket_name", "my.ckpt-bucket-1"), "launch": {"script": "jobs/pre-train_v2.py"}}
    )
    check_node("Prod_2.v-1", config, tmp_path, bucket="my.ckpt-bucket-1", group="tf-prod-2-v-1-hf")


# ---------------------------------------------------------------- the stack name


@pytest.mark.parametrize(
    "stack",
    ["a b", "x;touch P", "$(touch P)", "`touch P`", "x\ntouch P", "it's", 'a"b', "a\\b", "$HOME", "", "x/y",
     "x" * 101, "ü"],
)  # fmt: skip
def test_an_unsafe_stack_name_is_one_config_error_line(stack):
    config = StackConfig.from_sections(copy.deepcopy(BASE))
    for render in (
        lambda: render_fleets(stack, config),
        lambda: render_user_data(stack, config, config.fleets[0], bucket="b", group="g"),
    ):
        with pytest.raises(ConfigError) as exc:
            render()
        message = str(exc.value)
        assert "\n" not in message and message.startswith("stack name "), message
    with pytest.raises(ConfigError):
        check_stack_name(stack)


def test_pulumis_stack_name_rule():
    for good in ("dev", "Prod_2.v-1", "a", "x" * 100, "-x", ".x"):
        assert check_stack_name(good) == good


def test_render_refuses_an_unsafe_stack_file_name_in_one_line(tmp_path):
    project = _project(tmp_path, {"Pulumi.my stack.yaml": (STACKS / "Pulumi.dev.yaml").read_text()})
    result = run_trainfleet("render", "--stack", "my stack", "--out", str(tmp_path / "out"), cwd=project)
    assert_one_line_error(result, "stack name", "my stack")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ---------------------------------------------------------------- names the program passes in (bucket, group)


@pytest.mark.parametrize("value", [v for v in HOSTILE if not re.search("[\x00-\x1f\u2028]", v)][:20])
def test_bucket_and_group_from_the_program_are_quoted_too(value, tmp_path):
    """The bucket and group come from Pulumi outputs, not the schema: shq and tojson still carry them."""
    config = StackConfig.from_sections(copy.deepcopy(BASE))
    r = check_node("hs", config, tmp_path, bucket=value, group=value + "-g")
    fetch = ast.parse(r.parts["trainfleet-fetch.py"])
    constants = {
        t.id: ast.literal_eval(node.value)
        for node in fetch.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in ("BUCKET", "STACK", "FLEET")
    }
    assert constants == {"BUCKET": value, "STACK": "hs", "FLEET": "hf"}
    assert yaml.safe_load(r.document)["write_files"]  # still one valid YAML document


@pytest.mark.parametrize("value", ["b\ntouch P", "b\rx", "b\x00"])
def test_a_line_break_from_the_program_fails_the_render_instead_of_ending_a_line(value):
    config = StackConfig.from_sections(copy.deepcopy(BASE))
    with pytest.raises(TrainfleetError, match="control character"):
        render_user_data("hs", config, config.fleets[0], bucket=value, group="g")
    with pytest.raises(TrainfleetError):
        shq(value)


# ---------------------------------------------------------------- the templates and the documents


def test_every_value_in_a_node_template_goes_through_shq():
    """ONE filter for shell, env and unit files: `{{ name | shq }}` or `{{ (a ~ "/b") | shq }}`; the Python
    node file (trainfleet-fetch.py) takes JSON literals (`| tojson`). No cloud-config is a text template."""
    root = templates_root()
    assert not list(root.glob("cloud-config/*.j2")), "the cloud-config is dumped as YAML, not templated"
    templates = sorted((root / "node").glob("*.j2"))
    assert templates
    for path in templates:
        for expr in re.findall(r"\{\{-?\s*(.*?)\s*-?\}\}", path.read_text(), re.S):
            if path.name.endswith(".py.j2"):
                assert re.fullmatch(r"[\w.]+ \| tojson", expr), (path.name, expr)
            else:
                assert re.fullmatch(r"(?:[\w.]+|\([^()]*\)) \| shq", expr), (path.name, expr)


@pytest.mark.parametrize("cloud", sorted(FLEETS))
def test_quoted_args_keep_shellcheck_and_cloud_inits_schema_happy(cloud, tmp_path):
    args = ["--name", "my run's \"best\" one", "$(touch PWNED)", "a  b", "\\", "", "`x`", "ü ☃ 😀"]
    config = StackConfig.from_sections({**sections_with("launch.args", "x", cloud), "launch": {"args": args}})
    r = render_user_data("Prod_2.v-1", config, config.fleets[0], bucket="b-1", group="g-1")
    shellcheck = need_tool("shellcheck")
    for name, shell in (("trainfleet-boot.sh", "bash"), ("trainfleet-launch.sh", "bash"), ("trainfleet.env", "sh")):
        f = tmp_path / name
        f.write_text(r.parts[name], encoding="utf-8")
        result = subprocess.run([shellcheck, "-s", shell, str(f)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}:\n{result.stdout}"
    tool = need_tool("cloud-init")
    f = tmp_path / "user-data"
    f.write_text(r.document, encoding="utf-8")
    result = subprocess.run([tool, "schema", "--config-file", str(f)], capture_output=True, text=True)
    assert result.returncode == 0 and "Valid cloud-config" in result.stdout, result.stdout + result.stderr
    doc = yaml.safe_load(r.document)
    launch = next(e for e in doc["write_files"] if e["path"].endswith("trainfleet-launch.sh"))
    assert launch["content"] == r.parts["trainfleet-launch.sh"]
    assert r.document.count("content: |") == len(doc["write_files"]), "files stay readable literal blocks"


# ---------------------------------------------------------------- the CLI, as the hostile user met it


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: trainfleet\nruntime: python\nmain: infra/\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir(exist_ok=True)
    for name, text in files.items():
        (tmp_path / "stacks" / name).write_text(text)
    return tmp_path


def test_stacks_check_refuses_a_script_with_a_shell_command_in_one_line(tmp_path):
    text = (STACKS / "Pulumi.dev.yaml").read_text() + '  trainfleet:launch:\n    script: "x.py; touch P"\n'
    project = _project(tmp_path, {"Pulumi.hostile.yaml": text})
    result = run_trainfleet("stacks", "check", cwd=project)
    assert_one_line_error(result, "Pulumi.hostile.yaml", "trainfleet:launch.script", "x.py; touch P")
    assert not (project / "P").exists()
