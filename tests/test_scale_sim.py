"""The scale simulation (benchmarks/scale_sim.py, benchmarks/sim/) at CI size: its clock, its store's rates against the
numbers they come from, its scenarios on 2 to 4 nodes with the real agent, and its invariants, which must hold and
must be able to fail (bugs planted in the agent's restore and commit). Everything runs on the virtual clock: no
real timing enters any figure, so the tolerances below come from the model (latency, fair sharing), not from this
machine's load."""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest

from benchmarks.sim import invariants as inv
from benchmarks.sim import scenarios as sc
from benchmarks.sim.clock import Clock, NodeKilled
from benchmarks.sim.content import Identity, disk_bytes
from benchmarks.sim.fleet import World
from benchmarks.sim.shapes import MiB, RetryPolicy, store_shape
from benchmarks.sim.store import StoreError
from templates.agent.trainfleet_agent import checkpoints, watch

SPEC = sc.Spec(cloud="aws", nodes=2, model="7b", step_s=10.0)


def failed(outcome, prefix: str) -> list:
    return [c for c in outcome.checks if c.name.startswith(prefix) and not c.ok]


def passed_all(outcome) -> bool:
    return all(c.ok for c in outcome.checks) and not outcome.errors


# ------------------------------------------------------------------------------------------ the clock


def test_the_clock_runs_tasks_in_virtual_time_order():
    clock, seen = Clock(), []

    def main():
        def worker(i):
            for k in range(3):
                clock.sleep(i)
                seen.append((clock.elapsed(), i, k))

        tasks = [clock.spawn(lambda i=i: worker(i), f"w{i}") for i in (1, 2, 3)]
        results = clock.run_parallel([lambda i=i: (clock.sleep(i), i)[1] for i in range(5)], 2)
        for t in tasks:
            clock.join(t)
        doomed = clock.spawn(lambda: clock.sleep(1e9), "doomed", node="n")
        clock.sleep(5)
        clock.kill("n")
        clock.sleep(1)
        return results, doomed

    results, doomed = clock.run(main)
    assert results == [0, 1, 2, 3, 4]
    assert [t for t, _, _ in seen] == sorted(t for t, _, _ in seen)  # virtual-time order, whatever the real timing
    assert seen[-1] == (9.0, 3, 2)
    assert doomed.done and doomed.killed
    assert clock.elapsed() == 15.0  # 9 s of workers, then 5 + 1: no real time leaks in


def test_a_killed_task_dies_with_node_killed_not_an_exception_the_agent_catches():
    assert not issubclass(NodeKilled, Exception)


# ------------------------------------------------------------------------------------------ the store


def upload(tmp_path: Path, shape, sizes: dict[int, list[int]]):
    """Each node uploads its files at once (8 at a time, as upload_part does): {node: seconds}, the world."""
    world = World(shape.cloud, shape, str(tmp_path), keep_last=1)
    seconds: dict[int, float] = {}

    def main():
        tasks = []
        for rank, files in sizes.items():
            node = world.boot(rank)
            paths = []
            for i, size in enumerate(files):
                path = os.path.join(node.ckpt_dir, f"f{i}")
                world.contents.create(path, size, Identity("r", 1, 1, rank, f"f{i}"))
                paths.append(path)

            def up(node=node, paths=paths, rank=rank):
                t0 = world.clock.now
                world.clock.run_parallel([lambda p=p: node.store.put_file(f"k/{rank}/{p[-2:]}", p) for p in paths], 8)
                seconds[rank] = world.clock.now - t0

            tasks.append(world.clock.spawn(up, "upload", node=node.tag))
        for t in tasks:
            world.clock.join(t)

    world.run(main)
    return seconds, world


def test_an_upload_takes_its_bytes_over_the_nodes_rate_and_the_files_are_sparse(tmp_path):
    shape = store_shape("aws", 1).with_(connection_bps=None)
    seconds, world = upload(tmp_path, shape, {0: [10 * 10**9]})
    parts_per_connection = math.ceil(math.ceil(10e9 / (64 * MiB)) / 8)  # s3transfer: 8 parts of a file at once
    latency = (parts_per_connection + 2) * shape.latency_s  # each part, then CompleteMultipartUpload, HeadObject
    assert seconds[0] == pytest.approx(10e9 / shape.upload_bps + latency, rel=0.02)
    assert seconds[0] == pytest.approx(10.0, rel=0.10)  # 10 GB at S3's 1 GB/s per node
    files = [os.path.join(world.nodes[0].ckpt_dir, "f0")]
    assert os.path.getsize(files[0]) == 10**10 and os.stat(files[0]).st_blocks < 64  # sparse: no data written
    assert disk_bytes(world.nodes[0].ckpt_dir) == 10**10


def test_one_file_is_held_to_its_connections_rate(tmp_path):
    """S3: s3transfer sends 8 parts of a file at once, 85 MB/s each (checkpoint_io.csv): one 10 GB file takes
    10 GB / 680 MB/s, not 10 GB / 1 GB/s; eight files share the node's 1 GB/s."""
    shape = store_shape("aws", 1)
    seconds, _ = upload(tmp_path / "one", shape, {0: [10 * 10**9]})
    assert seconds[0] == pytest.approx(10e9 / (8 * 0.085e9), rel=0.10)
    seconds, _ = upload(tmp_path / "eight", shape, {0: [10**9] * 8})
    assert seconds[0] == pytest.approx(8.0, rel=0.10)


def test_the_account_link_is_shared_by_every_node(tmp_path):
    """Azure: each node 0.35 GB/s, the account 7.5 GB/s in all. 40 nodes want 14 GB/s: each gets 7.5 / 40."""
    shape = store_shape("azure", 40)
    seconds, _ = upload(tmp_path, shape, {r: [2 * 10**9] * 2 for r in range(40)})
    expected = 4e9 / (7.5e9 / 40)
    assert max(seconds.values()) == pytest.approx(expected, rel=0.10)
    assert min(seconds.values()) == pytest.approx(expected, rel=0.10)


def test_throttled_requests_are_retried_like_the_sdk_then_fail(tmp_path):
    """Over the service's request rate, requests are answered 503 SlowDown and the modelled botocore retries them;
    when its attempts run out the call raises, as the SDK does."""
    shape = store_shape("aws", 1).with_(limits={"write": 4, "read": 5500})
    seconds, world = upload(tmp_path / "slow", shape, {0: [64 * MiB * 32]})  # 32 parts, 8 at a time
    stats = world.bucket.stats
    assert stats["throttled (503 SlowDown)"] > 0 and stats["retries"] == stats["throttled (503 SlowDown)"]
    assert "k/0/f0" in world.bucket.objects  # it got there, later
    assert seconds[0] > 32 * 64 * MiB / (8 * 0.085e9)
    once = shape.with_(retry=RetryPolicy("no retries", 1, 1.0, 2.0, 20.0))
    with pytest.raises(StoreError, match="503 SlowDown after 1 attempts"):
        upload(tmp_path / "fail", once, {0: [64 * MiB * 32]})


# ------------------------------------------------------------------------------------------ scenarios


def test_periodic_checkpoints_match_the_model_and_hold_the_invariants(tmp_path):
    o = sc.periodic(SPEC, str(tmp_path))
    assert passed_all(o), [c for c in o.checks if not c.ok] or o.errors
    layout, f = SPEC.layout(), o.figures
    assert f["saves"] >= SPEC.keep_last + 1
    assert f["save_s"] == max(layout.saved_bytes) / 2e9  # LOCAL_SAVE_GBPS
    # node 1 holds only optimizer shards, 8 files at once: its part at the node's 1 GB/s
    assert f["upload_s"][1] == pytest.approx(layout.saved_bytes[1] / 1e9, rel=0.10)
    # node 0 also holds the model states file, which goes up at 8 x 85 MB/s: never faster than the model's bound
    assert f["upload_s"][0] >= 0.99 * f["upload_bound_s"][0]
    for lag in f["save_to_durable_s"]:
        assert lag == pytest.approx(f["save_s"] + f["upload_s"][0], rel=0.20)
    # the disk's peak: keep_last complete steps and the save in progress
    assert f["peak_disk"][0] == pytest.approx((SPEC.keep_last + 1) * layout.saved_bytes[0], abs=1024)  # + COMPLETE


def test_the_simulation_is_deterministic(tmp_path):
    a = sc.periodic(SPEC, str(tmp_path / "a"))
    b = sc.periodic(SPEC, str(tmp_path / "b"))
    assert a.figures == b.figures and a.stats == b.stats and a.virtual_s == b.virtual_s


def test_a_spot_notice_that_fits_ends_durable(tmp_path):
    o = sc.notice(SPEC, "aws-spot-terminate", str(tmp_path))
    f = o.figures
    assert passed_all(o), [c for c in o.checks if not c.ok] or o.errors
    assert f["fits"] and f["exit_asked_s"] == 0.0  # 120 s is the window: the exit is asked at once
    assert f["exit_step"] == f["first_step"] and f["lost_steps"] == 0
    assert f["first_durable_s"] <= f["deadline_s"]
    assert f["notice_durable"] and f["notice_durable"][0] == pytest.approx(f["first_durable_s"], abs=1.0)


def test_a_notice_that_cannot_fit_is_reported_not_failed(tmp_path):
    o = sc.notice(SPEC, "gcp-preempted", str(tmp_path))
    f = o.figures
    assert not f["fits"] and f["need_s"] > f["deadline_s"] == 30.0
    assert f["first_durable_s"] is None and f["lost_steps"] > 0
    assert not failed(o, "(4)")


def test_a_loss_a_restart_and_a_resize_hold_the_invariants(tmp_path):
    spec = sc.Spec(cloud="aws", nodes=4, model="7b", step_s=10.0)
    o = sc.loss_restart(spec, str(tmp_path))
    assert passed_all(o), [c for c in o.checks if not c.ok] or o.errors
    f, layout = o.figures, spec.layout()
    assert f["loss"]["latest"] == f["loss"]["s1"]  # the lost node's step never became LATEST
    # a cold restart fetches exactly what the layout says each node needs: its part and the shared model states
    assert f["cold"]["fetched"] == list(layout.restored_bytes)
    # survivors reuse their own part (node 0 holds all it needs); the replacement (rank 3) fetches its own too
    assert f["restart"]["fetched"] == [0, *(layout.restored_bytes[r] - layout.saved_bytes[r] for r in (1, 2)),
                                       layout.restored_bytes[3]]  # fmt: skip
    assert f["shrink_to"] == 3 and f["shrunk_durable"]
    # growing back, the new node fetches every part of the 3-node step
    assert f["grow"]["fetched"][3] == spec.layout(3).total_bytes
    # issue 29 #2, #7, #12: without elastic the 3 survivors stop; each converts the whole 4-node checkpoint in the
    # measured 2.97 s + bytes / 137 MB/s with 2.71 x its bytes on disk; the one lost mid-conversion is cleaned up
    names = {c.name for c in o.checks}
    assert {sc.inv.NODE_COUNT_STOPS, sc.inv.NO_TEMP_LEFT} <= names
    total = layout.total_bytes
    assert f["conversion"]["seconds"] == pytest.approx(2.97 + total / 137e6)
    assert f["conversion"]["peak_disk"] >= 2.71 * total


@pytest.mark.parametrize("kind", ["aws-asg-terminate", "azure-Terminate"])
def test_a_finished_job_releases_every_node_at_once(tmp_path, kind):
    """Issue 29 #11 on 2 nodes: the final checkpoint is LATEST and every node's termination is released within
    seconds of the scale to zero, not at the hook's 600 s (or Azure's notBeforeTimeout)."""
    o = sc.job_done(SPEC, kind, str(tmp_path))
    assert passed_all(o), [c for c in o.checks if not c.ok] or o.errors
    f = o.figures
    assert f["released"] == SPEC.nodes and f["release_max_s"] <= sc.RELEASE_BOUND_S and f["latest"] == 3


def test_a_second_save_of_a_step_is_never_mixed_into_its_commit(tmp_path):
    o = sc.second_save(SPEC, str(tmp_path))
    assert passed_all(o), [c for c in o.checks if not c.ok] or o.errors
    assert o.figures["run2"]["latest"] == o.figures["run1"]["s2"]  # the step saved twice, committed once


def test_a_second_save_is_never_mixed_even_when_a_node_is_slow(tmp_path):
    """Run 1's node 1 made its part of step S durable, node 0 was lost before committing; run 2 saves S again and
    node 1's new upload is slow: node 0 must not commit S with node 1's run-1 PART.json. (The simulation found this;
    COMPLETE's `save` id, carried into PART.json and checked by the commit, fixed it.)"""
    o = sc.second_save(SPEC, str(tmp_path), slow_rank=1, upload="watch")
    assert not failed(o, "(1)"), failed(o, "(1)")


# ------------------------------------------------------------------------------------------ planted bugs


def test_a_restore_that_fetches_other_nodes_shards_fails_invariant_3(tmp_path, monkeypatch):
    def every_part(manifest, node_rank):
        return [(n, e) for n, e in checkpoints.manifest_objects(manifest) if e["path"] != "COMPLETE"]

    monkeypatch.setattr(checkpoints, "needed_files", every_part)
    o = sc.loss_restart(sc.Spec(cloud="aws", nodes=2, model="7b"), str(tmp_path))
    bad = failed(o, "(3)")
    assert bad and "fetched node" in bad[0].detail


def test_a_commit_that_ignores_the_save_fails_invariant_1(tmp_path, monkeypatch):
    """The bug issue 29 #1 left, which two measures now close: node 0 took any PART.json of the step whose files are
    in the bucket (now only its own save's), and a node re-uploading a step left the other save's PART.json in place
    while its files went up (now deleted first). Without both, node 1 slow to upload the second save, the commit
    mixes the two saves."""
    real = checkpoints.read_part

    def any_save(store, prefix, step, node, listing, save=None):
        return real(store, prefix, step, node, listing)

    def keeps_the_old_part(store, prefix, ckpt_dir, step):
        with checkpoints.upload_lock(ckpt_dir, step):
            node = checkpoints.step_part(ckpt_dir, step)["node_rank"]
            if checkpoints.part_in_bucket(store, prefix, ckpt_dir, step, node):
                return False
            checkpoints.upload_part(store, prefix, ckpt_dir, step)
            return True

    monkeypatch.setattr(checkpoints, "read_part", any_save)
    monkeypatch.setattr(checkpoints, "ensure_part", keeps_the_old_part)
    monkeypatch.setattr(watch, "ensure_part", keeps_the_old_part)
    o = sc.second_save(SPEC, str(tmp_path), slow_rank=1, upload="watch")
    bad = failed(o, "(1)")
    assert bad and "mixes saves" in bad[0].detail


def test_invariant_2_catches_a_file_that_is_not_the_committed_one(tmp_path):
    """A restored file swapped for another save's (same name, same size) is caught by its identity."""
    o = sc.second_save(SPEC, str(tmp_path))
    assert not failed(o, "(2)")
    world = o.world
    restored = o.last_restore
    node = world.nodes[restored.rank]
    folder = os.path.join(node.ckpt_dir, f"step-{restored.step:08d}")
    name = sorted(n for n in os.listdir(folder) if n != "COMPLETE")[0]
    other = Identity("someone-else", restored.step, 99, restored.rank, name)
    world.contents.create(os.path.join(folder, name), os.path.getsize(os.path.join(folder, name)), other)
    world.contents.token(other)
    assert inv.restore_holds_committed(world, restored, False)


# ------------------------------------------------------------------------------------------ the command


def test_the_command_prints_its_tables_and_exits_by_the_invariants(capsys):
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "scale_sim.py"
    spec = importlib.util.spec_from_file_location("scale_sim", path)
    scale_sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale_sim)
    code = scale_sim.main(["--nodes", "2", "--model", "7b", "--profile", "ci", "--fault-rate", "0.01"])
    out = capsys.readouterr().out
    for heading in ("Checkpoints:", "Notices to node 0", "Restores", "Invariants", "wall time of the whole simulation"):
        assert heading in out
    assert code == (1 if "FAIL " in out else 0)
    assert "injected faults (500)" in out  # 1% of the requests failed and were retried
