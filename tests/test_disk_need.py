"""The disk a node needs for its checkpoints and the trainer's stop grace (infra/disk_need.py; issue 29 #3, #6).

Worked by hand from DeepSpeed's layout (infra/checkpoint_layout.py: 2 bytes/param of bf16 weights on the node of
data-parallel rank 0, 12 bytes/param of optimizer state split over the data-parallel ranks), then checked where the
rule lands: the rendered trainfleet.env and trainer unit, `trainfleet stacks check`, and the boot script's
`check_disk` run by bash against stand-in `df`/`du` and against the real ones.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest

from infra import disk_need as dn
from infra.checkpoint_layout import CheckpointLayout
from infra.config import StackConfig
from infra.userdata import NODE_ETC, NODE_HOME, NODE_STATE, render_user_data
from tests.conftest import STACKS, assert_one_line_error, run_trainfleet

GB = 10**9


def config(params: str, nodes: int, *, zero: int = 1, keep_last: int = 3, instance: str = "p4de.24xlarge",
           elastic: dict | None = None, **deepspeed) -> StackConfig:  # fmt: skip
    return StackConfig.from_sections(
        {
            "job": {"name": "big", "params": params, "tokens": "1T", "precision": "bf16"},
            "fleets": [{"name": "main", "cloud": "aws", "region": "us-east-1", "instance_type": instance,
                        "nodes": nodes}],  # fmt: skip
            "deepspeed": {"zero_stage": zero, "grad_accum": 8, **deepspeed},
            "checkpoint": {"keep_last": keep_last, **({"elastic": elastic} if elastic else {})},
        }
    )


def need_of(c: StackConfig) -> dn.DiskNeed:
    return dn.disk_need(c, c.fleets[0])


# ------------------------------------------------------------------------------------------- the rule, by hand


def test_70b_zero1_on_8_nodes_of_8_keeping_3():
    """Node 0's part: the whole bf16 model, 2 x 70e9 = 140 GB, and its 8 ranks' optimizer shards, 12 x 70e9 / 64
    x 8 = 105 GB: 245 GB (issue 29). Every other node saves 105 GB and restores 245 (its shards and the model). The
    kept steps and the one being written: (3 + 1) x 245 = 980 GB; a restore's copy beside them: 245 GB; 1,225 GB.
    The root volume adds 65 GB of image and venvs, over 93% of it: 1,290e9 / 0.93 / 2^30 = 1,291.9 -> 1,292 GiB.
    Stop grace: (60 s of step + 245 GB / 2 GB/s) x 1.25 = 228.1 -> 230 s (today's fixed 100 s kills the save)."""
    need = need_of(config("70B", 8))
    assert need.step_bytes == 245 * GB and need.saved_bytes == 245 * GB
    assert need.steps_bytes == 980 * GB
    assert need.restore_bytes == 245 * GB
    assert need.conversion_bytes == need.offload_bytes == 0
    assert need.checkpoint_bytes == 1225 * GB
    assert need.volume_gib == 1292
    assert dn.stop_grace_s(need.saved_bytes) == 230
    assert need.terms() == "4 x 245 GB (keep_last 3 + 1 being written) + 245 GB restore copy"
    # the planner's entry: the same rule from the layout of a plan, before there is a stack
    assert dn.need_for([CheckpointLayout(params=70 * GB, nodes=8)], keep_last=3) == need


def test_70b_on_64_nodes_keeps_the_whole_model_on_node_0():
    """At 64 nodes the shards shrink (12 x 70e9 / 512 x 8 = 13.1 GB) but node 0 still holds the 140 GB model: 153.1 GB
    (issue 29); 4 x 153.125 + 153.125 = 765.6 GB. Grace (60 + 76.6) x 1.25 = 170.7 -> 180 s."""
    need = need_of(config("70B", 64))
    assert need.step_bytes == 153_125_000_000
    assert need.checkpoint_bytes == 5 * 153_125_000_000
    assert dn.stop_grace_s(need.saved_bytes) == 180


def test_a_small_job_on_one_node():
    """1.3B bf16 ZeRO-2 on one g5.12xlarge (4 GPUs), keep_last 2, as the dev stacks: the node holds it all, 2.6 +
    15.6 = 18.2 GB; 3 x 18.2 + 18.2 = 72.8 GB; (72.8 + 65) / 0.93 / 2^30 = 137.99 -> 138 GiB of the 200 default.
    Grace (60 + 9.1) x 1.25 = 86 s, under the floor: 100 s."""
    need = need_of(config("1.3B", 1, zero=2, keep_last=2, instance="g5.12xlarge"))
    assert need.step_bytes == 18_200_000_000
    assert need.checkpoint_bytes == 72_800_000_000
    assert need.volume_gib == 138
    assert dn.stop_grace_s(need.saved_bytes) == 100


def test_elastic_counts_the_smallest_size_the_whole_checkpoint_and_its_conversion():
    """8 nodes shrinking to 4 (grad_accum 8): at 4 nodes node 0's part is 140 + 12 x 70 / 32 x 8 = 350 GB; a resize
    restores the whole checkpoint, 14 x 70e9 = 980 GB, and ds_to_universal peaks at 2.71 times its input (measured,
    conversion_rate.csv), writing 1.71 x 980 = 1,675.8 GB beyond it: 4 x 350 + 980 + 1,675.8 = 4,055.8 GB. Grace
    (60 + 175) x 1.25 = 293.75 -> 300 s."""
    need = need_of(config("70B", 8, elastic={"min_nodes": 4}))
    assert dn.node_counts(config("70B", 8, elastic={"min_nodes": 4}), config("70B", 8).fleets[0]) == [4, 8]
    assert need.step_bytes == 350 * GB
    assert need.restore_bytes == 980 * GB
    assert need.conversion_bytes == pytest.approx(1675.8 * GB, abs=1)
    assert need.checkpoint_bytes == pytest.approx(4055.8 * GB, abs=1)
    assert dn.stop_grace_s(need.saved_bytes) == 300


def test_zero3_nvme_offload_adds_the_swap_files():
    """7B ZeRO-3 on one node of 8 with the optimizer on NVMe: the swap holds each rank's 12 x 7e9 / 8 bytes, 84 GB
    for the node; the checkpoint part is the 84 GB of optimizer shards (and 8 small model-states files)."""
    need = need_of(config("7B", 1, zero=3, keep_last=1, offload_optimizer="nvme"))
    assert need.offload_bytes == 84 * GB
    assert need.checkpoint_bytes == 2 * need.step_bytes + need.restore_bytes + 84 * GB


def test_the_one_pass_restored_bytes_is_the_layouts():
    """disk_need's restored_bytes (one pass over the files without a pipeline) equals the layout's (the agent's
    needed_files per node): a change to what a node restores fails here."""
    for zero, tp, pp, precision, nodes in itertools.product((0, 1, 2, 3), (1, 2), (1, 2), ("bf16", "fp32"), (1, 2, 3)):
        if pp > 1 and (tp > 1 or zero > 1):
            continue
        lay = CheckpointLayout(params=7 * GB, zero_stage=zero, tp=tp, pp=pp, precision=precision, nodes=nodes)
        assert dn.restored_bytes(lay) == lay.restored_bytes, (zero, tp, pp, precision, nodes)


# ------------------------------------------------------------------------------------ the rendered node files


def test_the_env_file_and_unit_carry_the_grace_and_the_need():
    c = config("70B", 8)
    parts = render_user_data("big", c, c.fleets[0], bucket="b", group="g").parts
    env, unit = parts["trainfleet.env"], parts["trainfleet-trainer.service"]
    assert re.search(r"^TRAINFLEET_STOP_GRACE_SECONDS=230$", env, re.M)
    assert re.search(r"^TRAINFLEET_DISK_NEEDED_BYTES=1225000000000$", env, re.M)
    # systemd kills what is left only after the boot script's own grace; a short disk is not restarted
    assert re.search(r"^TimeoutStopSec=240$", unit, re.M)
    assert re.search(r"^RestartPreventExitStatus=78$", unit, re.M)
    small = render_user_data("prod", *_prod(), bucket="b", group="g").parts["trainfleet.env"]
    assert re.search(r"^TRAINFLEET_STOP_GRACE_SECONDS=100$", small, re.M)  # never under the old fixed grace


def _prod():
    from infra.stack_file import read_stack_file

    c = read_stack_file(STACKS / "Pulumi.prod.yaml").config
    return c, c.fleets[0]


# ------------------------------------------------------------------------------------------- stacks check


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: trainfleet\nruntime: python\nmain: infra/\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir(exist_ok=True)
    (tmp_path / "stacks" / "Pulumi.big.yaml").write_text(text)
    return tmp_path


def test_stacks_check_fails_a_70b_job_on_a_200_gb_root_and_passes_once_raised(tmp_path):
    text = (STACKS / "Pulumi.prod.yaml").read_text()
    for old, new in (("params: 13B", "params: 70B"), ("zero_stage: 3", "zero_stage: 1"), ("nodes: 4", "nodes: 8"),
                     ("    root_volume_gb: 500\n", "")):  # fmt: skip
        assert old in text
        text = text.replace(old, new)
    result = run_trainfleet("stacks", "check", "--stack", "big", cwd=_project(tmp_path, text), timeout=300)
    assert_one_line_error(
        result, "Pulumi.big.yaml", "fleets[0] (main)", "1,292 GiB", "200 GiB root volume",
        "4 x 245 GB (keep_last 3 + 1 being written) + 245 GB restore copy", "raise fleets[0].root_volume_gb to 1,292",
    )  # fmt: skip
    assert result.stdout == ""
    raised = text.replace("    on_demand_base: 1\n", "    on_demand_base: 1\n    root_volume_gb: 1292\n")
    result = run_trainfleet("stacks", "check", "--stack", "big", cwd=_project(tmp_path, raised), timeout=300)
    assert result.code == 0, result.stderr
    assert "big/main: root_volume_gb 1,292 needed, 1,292 set" in " ".join(result.stdout.split())
    assert "stop grace 230 s" in " ".join(result.stdout.split())


# ------------------------------------------------------------------------------------- the boot's check_disk


def _node(tmp_path: Path, needed: int) -> tuple[Path, dict[str, str]]:
    """The rendered boot script and env file of a small fleet under tmp_path, needing `needed` bytes; a stand-in
    agent python that records the run events it is asked to write."""
    c = config("1.3B", 1, zero=2, keep_last=2, instance="g5.12xlarge")
    parts = render_user_data("small", c, c.fleets[0], bucket="b", group="g").parts

    def moved(text: str) -> str:
        return text.replace(NODE_HOME, str(tmp_path / "opt")).replace(NODE_ETC, str(tmp_path / "etc")).replace(
            NODE_STATE, str(tmp_path / "state")
        )

    for d in ("opt", "etc", "state", "bin"):
        (tmp_path / d).mkdir(exist_ok=True)
    env, n = re.subn(r"(?m)^TRAINFLEET_DISK_NEEDED_BYTES=.*$", f"TRAINFLEET_DISK_NEEDED_BYTES={needed}",
                     moved(parts["trainfleet.env"]))  # fmt: skip
    assert n == 1
    (tmp_path / "etc" / "trainfleet.env").write_text(env)
    boot = tmp_path / "opt" / "trainfleet-boot.sh"
    boot.write_text(moved(parts["trainfleet-boot.sh"]))
    agent = tmp_path / "bin" / "fake-agent-python"
    agent.write_text(f'#!/bin/sh\nshift\necho "$@" >>{tmp_path / "events"}\n')
    agent.chmod(0o755)
    return boot, {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "TRAINFLEET_ENV_FILE": str(tmp_path / "etc" / "trainfleet.env"),
        "TRAINFLEET_AGENT_PYTHON": str(agent),
    }


def _fake(tmp_path: Path, avail: int, used: int) -> None:
    """`df -B1 --output=avail DIR` and `du -sbc DIR...` as GNU coreutils print them."""
    df, du = tmp_path / "bin" / "df", tmp_path / "bin" / "du"
    df.write_text(f"#!/bin/sh\nprintf '    Avail\\n%s\\n' {avail}\n")
    du.write_text(
        "#!/bin/sh\nshift\nfor p in \"$@\"; do printf '%s\\t%s\\n' " + str(used) + " \"$p\"; done\n"
        f"printf '%s\\ttotal\\n' {used}\n"
    )
    for f in (df, du):
        f.chmod(0o755)


def _check_disk(boot: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", 'set -euo pipefail; . "$1"; check_disk; echo launched', "bash", str(boot)],
                          capture_output=True, text=True, timeout=60, env=env)  # fmt: skip


def test_check_disk_refuses_a_short_disk_with_one_line_an_event_and_exit_78(tmp_path):
    boot, env = _node(tmp_path, needed=72_800_000_000)
    _fake(tmp_path, avail=50 * GB, used=20 * GB)  # 70 GB: short of 72.8
    result = _check_disk(boot, env)
    assert result.returncode == 78, result.stderr  # RestartPreventExitStatus: the unit does not start it again
    assert "launched" not in result.stdout
    fatal = [line for line in result.stderr.splitlines() if "FATAL" in line]
    assert len(fatal) == 1, result.stderr
    for needle in ("need 73 GB", "has 70 GB", "50 GB free + 20 GB of checkpoints", "root_volume_gb",
                   "trainfleet stacks check", "keep_last"):  # fmt: skip
        assert needle in fatal[0], (needle, fatal[0])
    calls = (tmp_path / "events").read_text()
    assert "event --cloud aws --bucket b" in calls and "--event disk_short" in calls
    assert "--field needed=72800000000 --field available=70000000000" in calls
    # no node of the fleet can train on the stack's disk: the group is scaled to zero, nothing bills idle
    assert "scale-to-zero --cloud aws --group g" in calls


def test_check_disk_counts_what_the_checkpoints_already_use(tmp_path):
    boot, env = _node(tmp_path, needed=72_800_000_000)
    _fake(tmp_path, avail=10 * GB, used=63 * GB)  # little free, but the kept steps are part of the need
    result = _check_disk(boot, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "launched"
    assert "disk: 73 GB for checkpoints" in result.stderr
    assert not (tmp_path / "events").exists()


def test_check_disk_with_the_real_df_and_du(tmp_path):
    """The real GNU coreutils on this machine's disk: a need of 1 byte passes, one of 10^18 bytes (an exabyte) does
    not, and the checkpoint folder's own bytes count."""
    boot, env = _node(tmp_path, needed=1)
    (tmp_path / "state" / "checkpoints" / "step-00000001").mkdir(parents=True)
    (tmp_path / "state" / "checkpoints" / "step-00000001" / "part.pt").write_bytes(b"x" * 100_000)
    result = _check_disk(boot, env)
    assert result.returncode == 0 and result.stdout.strip() == "launched", result.stderr
    boot, env = _node(tmp_path, needed=10**18)
    result = _check_disk(boot, env)
    assert result.returncode == 78 and "FATAL" in result.stderr
    assert "scale-to-zero" in (tmp_path / "events").read_text()


@pytest.mark.parametrize("needed", ["0", ""])
def test_check_disk_is_off_without_a_need(tmp_path, needed):
    boot, env = _node(tmp_path, needed=0)
    text = (tmp_path / "etc" / "trainfleet.env").read_text()
    (tmp_path / "etc" / "trainfleet.env").write_text(
        re.sub(r"(?m)^TRAINFLEET_DISK_NEEDED_BYTES=.*$", f"TRAINFLEET_DISK_NEEDED_BYTES={needed}", text)
    )
    _fake(tmp_path, avail=0, used=0)
    result = _check_disk(boot, env)
    assert result.returncode == 0 and result.stdout.strip() == "launched", result.stderr
