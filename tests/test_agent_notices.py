"""Notices by their real deadline (issue 13 #3): each event type's deadline as its cloud documents it (the
sources are cited in templates/agent/trainfleet_agent/notices.py), the earliest deadline ruling when several
notices come, a long notice not stopping training at once, and an agent that systemd always restarts.

The deadline tests read the agent's notice source against the metadata stand-ins (tests/metadata_servers.py)
on loopback; the watch tests run the agent zipapp and a fake trainer as processes against moto's S3 and wait
for the agent's log events, never for a fixed time.
"""

from __future__ import annotations

import email.utils
import json
import time
import uuid

import boto3
import pytest

from infra.stack_file import list_stack_files, read_stack_file, stack_name
from infra.userdata import render_parts
from tests.agent_support import agent, load_agent_module, trainer
from tests.conftest import STACKS
from tests.metadata_servers import AwsImds, AzureImds, GceMetadata

notices = load_agent_module("notices")


def near(value: float, expected: float, slack: float = 2.0) -> bool:
    return abs(value - expected) <= slack


# ------------------------------------------------------------------ the board: the earliest deadline rules


def test_the_board_keeps_the_earliest_deadline_and_a_later_one_never_postpones_it():
    board = notices.NoticeBoard(window_s=10)
    now = time.time()
    hook = notices.Notice("aws-asg-terminate", True, "Terminated", now + 600, key="aws-asg")
    spot = notices.Notice("aws-spot-terminate", True, {}, now + 120, key="aws-spot")
    assert board.add(hook) == "new"
    assert board.due() is None, "600 s left, 10 s needed: not yet"
    assert board.add(spot) == "new"
    assert board.earliest() is spot and board.deadline() == now + 120
    # the same notice seen again with a later deadline (a deadline computed as now + notice) changes nothing
    assert (
        board.add(notices.Notice("aws-asg-terminate", True, "Terminated", now + 700, key="aws-asg")) == "same"
    )
    # ... and with a sooner one, moves that notice's deadline earlier
    sooner = notices.Notice("aws-spot-terminate", True, {}, now + 5, key="aws-spot")
    assert board.add(sooner) == "earlier"
    assert board.due() is sooner and sooner.at == spot.at, "the first sighting stays the notice's start"


def test_only_a_heartbeat_moves_a_deadline_later_and_the_earliest_still_rules():
    """Issue 29 #11: a lifecycle hook's heartbeat restarts its timeout, the one way a deadline on the board moves
    later; a notice seen again never does (above), and a later hook never postpones a spot notice."""
    board = notices.NoticeBoard(window_s=10)
    now = time.time()
    hook = notices.Notice("aws-asg-terminate", True, "Terminated", now + 600, key="aws-asg")
    board.add(hook)
    assert board.extend("aws-asg", now + 900) and board.deadline() == now + 900
    assert not board.extend("aws-asg", now + 800), "an older heartbeat's timeout never pulls it back"
    assert not board.extend("aws-spot", now + 900), "nothing to extend"
    spot = notices.Notice("aws-spot-terminate", True, {}, now + 120, key="aws-spot")
    board.add(spot)
    board.extend("aws-asg", now + 2000)
    assert board.earliest() is spot and board.deadline() == now + 120


def test_a_canceled_event_is_dropped_unless_the_trainer_was_already_asked_to_exit():
    board = notices.NoticeBoard(window_s=30)
    now = time.time()
    ev = notices.Notice("azure-Terminate", True, {}, now + 600, ["E1"], key="azure:E1")
    cancel = notices.Notice("azure-canceled", True, "E1", now, ["E1"], key="azure:E1", cancelled=True)
    board.add(ev)
    assert board.add(cancel) == "cancelled" and board.earliest() is None
    board.add(ev)
    assert board.start_exit() is True and board.start_exit() is False
    assert board.add(cancel) == "same" and board.earliest() is ev
    assert board.due() is ev, "once exiting, the notice is handled whatever is left"


# ------------------------------------------------------------------ each event type's deadline


def source(cloud: str, url: str, window_s: float = 30.0, poll_s: float = 0.1):
    return notices.NoticeSource(cloud, url, window_s, poll_s, 2.0)


def test_aws_spot_deadline_is_the_notices_time_and_the_group_hooks_is_its_heartbeat():
    imds = AwsImds().start()
    try:
        src = source("aws", imds.url)
        assert src.poll() == []
        imds.notice(
            "terminate", in_s=120
        )  # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
        imds.values["autoscaling/target-lifecycle-state"] = "Terminated"
        imds.rebalance_recommendation()
        got = {n.key: n for n in src.poll()}
        at = notices._utc(imds.instance_action["time"])
        assert got["aws-spot"].hard and got["aws-spot"].deadline == at
        assert near(got["aws-asg"].deadline, time.time() + notices.ASG_HOOK_S)
        assert got["aws-rebalance"].hard is False
        assert src.poll() == [], "the same notices again are not new"
    finally:
        imds.stop()


@pytest.mark.parametrize("gpu,notice_s", [(True, 3600.0), (False, 60.0)])
def test_gcp_maintenance_terminate_gives_gpu_vms_an_hour_and_preemption_30s(monkeypatch, gpu, notice_s):
    """https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance: "Compute Engine gives GPU VMs a 1-hour
    stopping notice, while normal VMs receive only a 60-second notice"; a preempted VM has 30 s."""
    monkeypatch.setattr(notices, "gpu_attached", lambda: gpu)
    gce = GceMetadata().start()
    try:
        src = source("gcp", gce.url)
        assert src.poll() == []
        gce.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        (n,) = src.poll()
        assert n.hard and n.kind == "gcp-maintenance-terminate" and near(n.deadline, time.time() + notice_s)
        gce.preempt()
        (p,) = src.poll()
        assert p.kind == "gcp-preempted" and near(p.deadline, time.time() + 30)
    finally:
        gce.stop()


def test_gcp_upcoming_maintenance_window_start_is_the_deadline_when_sooner(monkeypatch):
    monkeypatch.setattr(notices, "gpu_attached", lambda: True)
    gce = GceMetadata().start()
    try:
        src = source("gcp", gce.url)
        gce.schedule_maintenance(window_start_s=600)
        assert src.poll() == [], "a scheduled window on its own is only logged"
        gce.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        (n,) = src.poll()
        window_start = json.loads(gce.values["instance/upcoming-maintenance"])["window_start_time"]
        assert n.deadline == notices._utc(window_start), "the window starts before the hour's notice ends"
    finally:
        gce.stop()


@pytest.mark.parametrize(
    "text,expected",
    [
        ("{ }", None),
        ("NONE", None),
        ('{ "error": "no notifications have been received yet, try again later" }', None),
        (
            '{"window_start_time": "2030-01-02T03:04:05Z", "maintenance_status": "PENDING"}',
            "2030-01-02T03:04:05Z",
        ),
        ('{"Upcoming maintenance": {"window_start_time": "2030-01-02T03:04:05Z"}}', "2030-01-02T03:04:05Z"),
        (
            '{"windowStartTime": "2030-01-02T03:04:05Z", "maintenanceStatus": "ONGOING"}',
            "2030-01-02T03:04:05Z",
        ),
        ('{"window_start_time": "2030-01-02T03:04:05Z", "maintenance_status": "COMPLETE"}', None),
    ],
)
def test_gcp_upcoming_maintenance_answers_are_read_as_documented(text, expected):
    start, _doc = notices.upcoming_window_start(text)
    assert start == (notices._utc(expected) if expected else None)


def _http_date(t: float) -> str:
    return email.utils.formatdate(t, usegmt=True)


def test_azure_deadline_is_not_before_and_each_types_minimum_notice_without_it():
    """https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events: NotBefore is when the
    event may start; the minimum notice per type is Preempt 30 s, Terminate 5 to 15 min, Reboot 15 min,
    Redeploy 10 min; Freeze pauses the VM for seconds (soft here); a Started event has a blank NotBefore."""
    imds = AzureImds(vm_name="vm_a").start()
    try:
        src = source("azure", imds.url)
        assert src.poll() == []
        ids = {t: imds.schedule(t, s) for t, s in [("Preempt", 30), ("Terminate", 300), ("Reboot", 900),
                                                 ("Redeploy", 600), ("Freeze", 900)]}  # fmt: skip
        other = imds.schedule("Preempt", 30, resources=["vm_b"])  # another VM's: not ours
        got = {n.kind: n for n in src.poll()}
        assert sorted(got) == [
            "azure-Freeze",
            "azure-Preempt",
            "azure-Reboot",
            "azure-Redeploy",
            "azure-Terminate",
        ]
        assert got["azure-Freeze"].hard is False
        for t, s in [("Preempt", 30), ("Terminate", 300), ("Reboot", 900), ("Redeploy", 600)]:
            n = got["azure-" + t]
            assert n.hard and n.event_ids == [ids[t]] and n.resources == ["vm_a"]
            assert near(n.deadline, time.time() + s), (t, n.deadline - time.time())
        assert all(other not in n.event_ids for n in got.values())
        # NotBefore unreadable: the type's minimum notice; Started (NotBefore blank): now
        with imds.hub.lock:
            for e in imds.hub.events:
                if e["EventType"] == "Reboot":
                    e["NotBefore"] = "soon"
                if e["EventType"] == "Redeploy":
                    e.update(NotBefore="", EventStatus="Started")
        src2 = source("azure", imds.url)
        got = {n.kind: n for n in src2.poll()}
        assert near(got["azure-Reboot"].deadline, time.time() + 900)
        assert near(got["azure-Redeploy"].deadline, time.time())
        # a canceled event leaves the document: its notice is withdrawn
        imds.hub.cancel(ids["Terminate"])
        (cancel,) = [n for n in src2.poll() if n.cancelled]
        assert cancel.key == "azure:" + ids["Terminate"]
    finally:
        imds.stop()


# ------------------------------------------------------------------ the agent, as a process


@pytest.fixture
def env(moto):
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": moto.url}  # fmt: skip


@pytest.fixture
def bucket(moto):
    name = "ckpt-" + uuid.uuid4().hex[:12]
    s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")  # fmt: skip
    s3.create_bucket(Bucket=name)
    return name


@pytest.mark.parametrize("first", ["group", "spot"])
def test_the_earliest_deadline_rules_whatever_order_the_notices_come_in(env, bucket, tmp_path, first):
    """A group termination (the hook's 600 s) and a spot interruption (16 s here) on the same node, in either
    order: the trainer is asked to exit when the spot notice's deadline leaves only the window (6 s), never
    at the hook's; both terminations are then released."""
    from tests.fake_autoscaling_hooks import FakeAutoScalingHooks

    imds = AwsImds(slow_s=3.0).start()
    hooks = FakeAutoScalingHooks().start()
    group, instance = "tf-dev-dev", imds.values["instance-id"]
    env = {**env, "AWS_ENDPOINT_URL_AUTO_SCALING": hooks.url, "TRAINFLEET_GROUP": group,
           "TRAINFLEET_ASG_HOOK_SECONDS": "600"}  # fmt: skip
    tr = trainer(
        tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "1", "--ckpt-every", "20"
    )
    args = ["watch", "--cloud", "aws", "--bucket", bucket, "--prefix", "run1", "--ckpt-dir", str(tmp_path / "ckpt"),
            "--run-dir", str(tmp_path / "run"), "--metadata-url", imds.url, "--poll-s", "0.2", "--scan-s", "0.2",
            "--http-timeout-s", "1", "--notice-window-s", "6"]  # fmt: skip
    ag = agent(*args, env=env)

    def group_terminates():
        hooks.terminating(group, "trainfleet-checkpoint", instance)
        imds.values["autoscaling/target-lifecycle-state"] = "Terminated"
        return ag.wait_event("notice", timeout=10, pred=lambda e: e["kind"] == "aws-asg-terminate")

    def spot_interrupts():
        imds.notice("terminate", in_s=16)
        return ag.wait_event("notice", timeout=10, pred=lambda e: e["kind"] == "aws-spot-terminate")

    try:
        ag.wait_event("durable", timeout=30)
        steps = (
            [group_terminates, spot_interrupts] if first == "group" else [spot_interrupts, group_terminates]
        )
        one = steps[0]()
        assert one.get("exit_in_s", 0) > 0, "more than the window left: no exit yet"
        signal = ag.wait_event("trainer_signalled", timeout=10, pred=lambda e: e["ts"] >= one["ts"])
        assert signal["signal"] == "SIGUSR1", "a long notice asks for a checkpoint, training goes on"
        steps[1]()
        spot = ag.wait_event("notice", timeout=1, pred=lambda e: e["kind"] == "aws-spot-terminate")
        spot_deadline = spot["ts"] + spot["deadline_in_s"]
        stop = ag.wait_event("trainer_signalled", timeout=60, pred=lambda e: e["signal"] == "SIGTERM")
        assert spot_deadline - 6 - 1.5 <= stop["ts"] <= spot_deadline, (spot, stop)
        wait = ag.wait_event("notice_wait", timeout=10)
        assert wait["deadline_in_s"] <= 7, wait
        assert tr.wait(30) == 0 and ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
        hooks.stop()
        imds.stop()
    assert ag.named("notice_durable")
    assert [c["InstanceId"] for c in hooks.completed] == [instance], "the group's termination is released too"


def test_a_restarted_agent_does_not_handle_a_handled_termination_again(env, bucket, tmp_path):
    """systemd restarts the agent whatever ended it (Restart=always), also just after it handled a termination
    the cloud is still serving: the restarted agent neither asks the trainer again (it is gone; its pid may be
    another process's by now) nor exits again. It watches, and syncs on DONE."""
    imds = AwsImds(slow_s=3.0).start()
    ckpt, run = tmp_path / "ckpt", tmp_path / "run"
    tr = trainer(ckpt, run, "--step-s", "0.05", "--blob-mb", "0.5")
    args = ["watch", "--cloud", "aws", "--bucket", bucket, "--prefix", "run1", "--ckpt-dir", str(ckpt),
            "--run-dir", str(run), "--metadata-url", imds.url, "--poll-s", "0.2", "--scan-s", "0.2"]  # fmt: skip
    ag = agent(*args, env=env)
    again = None
    try:
        ag.wait_event("watch_start", timeout=10)
        imds.notice("terminate", in_s=120)
        assert tr.wait(30) == 0 and ag.wait(30) == 0, "\n".join(ag.stderr_lines)
        step = ag.wait_event("notice_durable", timeout=1)["step"]
        again = agent(*args, env=env)  # what systemd does 5 s later
        again.wait_event("notice_already_handled", timeout=20)
        polls = imds.count("spot/instance-action")
        assert imds.wait_count("spot/instance-action", polls + 3) >= polls + 3, "still watching"
        assert again.alive() and not again.named("trainer_signalled") and not again.named("notice_wait")
        (run / "DONE").write_text(str(step))
        again.wait_event("training_done", timeout=30)
    finally:
        for p in (ag, again, tr):
            if p is not None:
                p.kill()
        imds.stop()
    assert again.named("training_done")


# ------------------------------------------------------------------ the unit: the agent always comes back


STACK_NAMES = [stack_name(p) for p in list_stack_files(STACKS.parent)]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_systemd_restarts_the_agent_whenever_it_ends(stack):
    """The agent exits 0 after a handled termination and after DONE; anything else that ends it (a crash, an
    old agent exiting on a notice that did not terminate the VM) must not leave training unwatched, so the
    unit restarts it always, not only on failure."""
    config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
    for fleet in config.fleets:
        unit = render_parts(stack, config, fleet, bucket="b", group="g")["trainfleet-agent.service"]
        service = unit.split("[Service]", 1)[1].split("[Install]", 1)[0]
        restart = [line for line in service.splitlines() if line.startswith("Restart=")]
        assert restart == ["Restart=always"], unit
