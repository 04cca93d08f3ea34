"""Sharded checkpoints (issue 13 #1): every node uploads the files its own ranks wrote, node rank 0 commits the
step once every node's part is durable, and a node restores only what it needs to resume.

The file layout is DeepSpeed 0.19's own (runtime/engine.py `_get_ckpt_name`, `_get_zero_ckpt_name`): data-
parallel rank 0 writes `mp_rank_00_model_states.pt` (ZeRO-0/1/2), every rank r writes
`zero_pp_rank_<r>_mp_rank_00_optim_states.pt`. On load (`_get_all_zero_checkpoint_state_dicts`) each rank
reads the model states and only its own ZeRO file, so node 1 of 2 needs node 0's model states but not node
0's optimizer shards. The bucket is the in-memory stand-in of tests/test_agent_commit_restore.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.test_agent_commit_restore import PREFIX, BucketStandIn, agent

TAG = "global_step7"
RANKS_PER_NODE = 2


def node_files(node: int, step: int, layout: str = "fp32") -> dict[str, bytes]:
    """What node `node`'s two ranks write for `step` (rank r = node * 2 + local rank). `layout`: "fp32"; "bf16",
    where DeepSpeed prefixes the optimizer shards `bf16_` (engine.py `_get_zero_ckpt_prefix`: f'{"bf16_" if
    bf16_mode else ""}zero_pp_rank_{dp_rank}', bf16_mode = bfloat16_enabled()); "nvme", ZeRO-Infinity's optimizer
    offload, which also copies each rank's swap folder to `<tag>/offloaded_tensors/rank<r>/` (engine.py
    `_save_checkpoint`, `zero_nvme_offload_optimizer`; each rank loads only its own on resume)."""
    files = {}
    shard = "bf16_zero_pp_rank" if layout == "bf16" else "zero_pp_rank"
    for local in range(RANKS_PER_NODE):
        rank = node * RANKS_PER_NODE + local
        files[f"{TAG}/{shard}_{rank}_mp_rank_00_optim_states.pt"] = f"optim r{rank} s{step} ".encode() * 40
        if layout == "nvme":
            for tensor in ("0.tensor.swp", "1.tensor.swp"):
                files[f"{TAG}/offloaded_tensors/rank{rank}/{tensor}"] = f"swap r{rank} {tensor}".encode() * 30
    if node == 0:
        files[f"{TAG}/mp_rank_00_model_states.pt"] = f"model s{step} ".encode() * 60
    return files


def save_part(ckpt: Path, step: int, node: int, nodes: int, layout: str = "fp32", save: str | None = None,
              salt: bytes = b"") -> None:  # fmt: skip
    """As templates/train.py saves: the node's files, then COMPLETE naming its node rank, the node count and (train.py
    writes it) the save, `<launch id>:<step>`. `salt`: other bytes of the same sizes, as another run's save has."""
    d = ckpt / f"step-{step:08d}"
    for rel, data in node_files(node, step, layout).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(bytes(b ^ salt[0] for b in data) if salt else data)
    done = {"step": step, "node_rank": node, "nodes": nodes, **({"save": save} if save else {})}
    (d / "COMPLETE").write_text(json.dumps(done))


@pytest.fixture
def bucket():
    return BucketStandIn()


def upload(bucket, tmp_path, step: int, node: int, nodes: int, keep_last: int = 0, layout: str = "fp32"):
    ckpt = tmp_path / f"node{node}"
    save_part(ckpt, step, node, nodes, layout)
    return agent.upload_step(bucket, PREFIX, str(ckpt), step, keep_last=keep_last)


def test_each_node_uploads_its_own_part_and_rank_0_commits_only_when_all_are_durable(bucket, tmp_path):
    assert upload(bucket, tmp_path, 7, 0, 2) is None  # node 1's part is not there yet: no commit
    assert f"{PREFIX}/step-00000007/MANIFEST.json" not in bucket.objects
    assert f"{PREFIX}/LATEST" not in bucket.objects
    upload(bucket, tmp_path, 7, 1, 2)
    assert f"{PREFIX}/LATEST" not in bucket.objects  # only rank 0 commits
    manifest = agent.commit(bucket, PREFIX, 7, 2)
    assert manifest is not None and manifest["nodes"] == 2
    assert bucket.objects[f"{PREFIX}/LATEST"] == b"step-00000007"
    for node in (0, 1):
        for rel, data in node_files(node, 7).items():
            assert bucket.objects[f"{PREFIX}/step-00000007/node-{node}/{rel}"] == data
        listed = {e["path"]: e["checksum"] for e in manifest["parts"][node]["files"]}
        assert listed == {rel: "sha256:" + hashlib.sha256(d).hexdigest() for rel, d in node_files(node, 7).items()}
    puts = [k for op, k in bucket.ops if op == "put"]
    parts_at = [puts.index(f"{PREFIX}/step-00000007/node-{n}/PART.json") for n in (0, 1)]
    assert max(parts_at) < puts.index(f"{PREFIX}/step-00000007/MANIFEST.json") < puts.index(f"{PREFIX}/LATEST")


def test_a_part_whose_file_is_missing_in_the_bucket_blocks_the_commit(bucket, tmp_path):
    upload(bucket, tmp_path, 7, 1, 2)
    del bucket.objects[f"{PREFIX}/step-00000007/node-1/{TAG}/zero_pp_rank_3_mp_rank_00_optim_states.pt"]
    assert upload(bucket, tmp_path, 7, 0, 2) is None
    assert f"{PREFIX}/LATEST" not in bucket.objects


def test_a_part_claiming_another_node_blocks_the_commit(bucket, tmp_path):
    upload(bucket, tmp_path, 7, 1, 2)
    key = f"{PREFIX}/step-00000007/node-1/PART.json"
    part = json.loads(bucket.objects[key])
    bucket.objects[key] = json.dumps(part | {"node": 0}).encode()
    assert upload(bucket, tmp_path, 7, 0, 2) is None


def committed(bucket, tmp_path, step: int = 7, nodes: int = 2, layout: str = "fp32") -> None:
    for node in range(nodes):
        upload(bucket, tmp_path / f"save{step}", step, node, nodes, layout=layout)
    assert agent.commit(bucket, PREFIX, step, nodes) is not None


def local_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "COMPLETE"}


@pytest.mark.parametrize("layout", ["fp32", "bf16", "nvme"])
@pytest.mark.parametrize("node", [0, 1])
def test_a_fresh_node_restores_its_own_part_and_the_model_states_only(bucket, tmp_path, node, layout):
    """Issue 29 #5: bf16 shards (the default precision) and NVMe-offload swap folders are per rank too: a node
    that fetched every node's would download N times the optimizer state (~840 GB instead of ~105 GB at 70B on
    8 nodes)."""
    committed(bucket, tmp_path, layout=layout)
    dest = tmp_path / "fresh"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=node, nodes=2) == 7
    model = f"{TAG}/mp_rank_00_model_states.pt"
    want = node_files(node, 7, layout) | {model: node_files(0, 7, layout)[model]}
    assert local_tree(dest / "step-00000007") == want
    marker = json.loads((dest / "step-00000007" / "COMPLETE").read_text())
    assert marker == {"step": 7, "node_rank": node, "nodes": 2, "restored": True, "whole": False}
    # 2 nodes x (2 optimizer shards) + model states: a node fetches 2 of the 4 optimizer shards
    other = 1 - node
    assert not any(f"zero_pp_rank_{other * 2}" in p for p in local_tree(dest / "step-00000007"))


def test_a_node_with_its_own_part_on_disk_fetches_only_the_shared_files(bucket, tmp_path, capfd):
    committed(bucket, tmp_path)
    own = tmp_path / "save7" / "node1"  # node 1's own save of step 7, still on its disk
    capfd.readouterr()
    assert agent.restore(bucket, PREFIX, str(own), node_rank=1, nodes=2) == 7
    restored = [json.loads(line) for line in capfd.readouterr().err.splitlines() if '"restored"' in line]
    assert restored[-1]["fetched_files"] == 1  # the model states; its two optimizer shards were reused
    assert local_tree(own / "step-00000007")[f"{TAG}/mp_rank_00_model_states.pt"] == node_files(0, 7)[
        f"{TAG}/mp_rank_00_model_states.pt"
    ]


@pytest.mark.parametrize("older_at_this_count", [True, False])
def test_a_step_saved_by_another_node_count_stops_the_job_instead_of_resuming_older_work(
    bucket, tmp_path, older_at_this_count
):
    """Issue 29 #2: without elastic recovery, a job whose node count changed skipped every step saved at the other
    count and resumed from an older step (here 5), or from step 0 when there was none: training silently thrown
    away. Restore now refuses, naming the step, both counts and the fix, and leaves the node's disk alone."""
    if older_at_this_count:
        committed(bucket, tmp_path, step=5, nodes=3)
    committed(bucket, tmp_path, step=7, nodes=2)
    dest = tmp_path / "d"
    dest.mkdir()
    with pytest.raises(agent.NodeCountChanged) as e:
        agent.restore(bucket, PREFIX, str(dest), node_rank=0, nodes=3)
    assert (e.value.step, e.value.saved_by, e.value.nodes) == (7, 2, 3)
    assert "step 7, was saved by 2 node(s) and this job has 3" in str(e.value)
    assert "checkpoint.elastic" in str(e.value) and "with 2 node(s) again" in str(e.value)
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("node_rank, nodes", [(0, 1), (2, 3)])
def test_resize_fetches_every_part_of_a_step_saved_by_another_node_count(bucket, tmp_path, node_rank, nodes):
    """Elastic recovery: a job now on 1 node (or rank 2 of 3, a rank that did not exist) takes the 2-node step
    whole, every rank's ZeRO shard included, to convert it (templates/node/trainfleet-resize.py), and not the
    older step its own node count saved."""
    committed(bucket, tmp_path, step=5, nodes=nodes)
    committed(bucket, tmp_path, step=7, nodes=2)
    dest = tmp_path / "d"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=node_rank, nodes=nodes, resize=True) == 7
    assert local_tree(dest / "step-00000007") == node_files(0, 7) | node_files(1, 7)
    marker = json.loads((dest / "step-00000007" / "COMPLETE").read_text())
    assert marker == {"step": 7, "node_rank": node_rank, "nodes": 2, "restored": True, "whole": True}


def test_resize_reuses_a_step_this_node_already_converted_and_its_own_part(bucket, tmp_path, capfd):
    committed(bucket, tmp_path, step=7, nodes=2)
    own = tmp_path / "save7" / "node1"  # node 1's own save of step 7: its two shards are reused, not fetched
    capfd.readouterr()
    assert agent.restore(bucket, PREFIX, str(own), node_rank=0, nodes=1, resize=True) == 7
    restored = [json.loads(line) for line in capfd.readouterr().err.splitlines() if '"restored"' in line]
    assert (restored[-1]["files"], restored[-1]["fetched_files"], restored[-1]["whole"]) == (5, 3, True)
    folder = own / "step-00000007"  # as trainfleet-resize.py leaves it: universal files, COMPLETE universal
    for p in list(folder.rglob("*.pt")):
        p.unlink()
    (folder / "zero").mkdir()
    (folder / "COMPLETE").write_text(json.dumps({"step": 7, "nodes": 2, "universal": True, "restored": True}))
    before = list(bucket.ops)
    assert agent.restore(bucket, PREFIX, str(own), node_rank=0, nodes=1, resize=True) == 7
    assert [op for op in bucket.ops[len(before):] if op[0] == "get" and "/node-" in op[1]] == []
    assert (folder / "zero").is_dir(), "the converted step is used as it is"


def test_a_parts_manifest_with_a_part_missing_is_malformed_and_restore_falls_back(bucket, tmp_path):
    committed(bucket, tmp_path, step=5)
    committed(bucket, tmp_path, step=7)
    key = f"{PREFIX}/step-00000007/MANIFEST.json"
    manifest = json.loads(bucket.objects[key])
    manifest["parts"] = manifest["parts"][:1]
    bucket.objects[key] = json.dumps(manifest).encode()
    dest = tmp_path / "d"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=1, nodes=2) == 5


@pytest.mark.parametrize("where", ["one part", "two parts"])
def test_a_manifest_with_a_file_where_another_needs_a_folder_is_malformed_and_restore_falls_back(
    bucket, tmp_path, where
):
    """Issue 29 #14: `a` and `a/b` cannot both be files of one step folder; restore raised on it (and the boot
    retried forever) instead of falling back to the step before. Sizes and checksums of the real objects, so only
    the shape is wrong."""
    committed(bucket, tmp_path, step=5)
    committed(bucket, tmp_path, step=7)
    key = f"{PREFIX}/step-00000007/MANIFEST.json"
    manifest = json.loads(bucket.objects[key])
    owner = manifest["parts"][1 if where == "two parts" else 0]
    model = next(e for e in manifest["parts"][0]["files"] if e["path"].endswith("model_states.pt"))
    under = {**model, "path": model["path"] + "/inside.pt"}
    owner["files"].append(under)
    node = manifest["parts"].index(owner)
    bucket.objects[f"{PREFIX}/step-00000007/node-{node}/{under['path']}"] = bucket.objects[
        f"{PREFIX}/step-00000007/node-0/{model['path']}"
    ]
    bucket.objects[key] = json.dumps(manifest).encode()
    dest = tmp_path / "d"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=0, nodes=2) == 5


def test_a_restored_step_is_not_uploaded_again(bucket, tmp_path):
    committed(bucket, tmp_path)
    dest = tmp_path / "d"
    dest.mkdir()
    agent.restore(bucket, PREFIX, str(dest), node_rank=1, nodes=2)
    before = list(bucket.ops)
    assert agent.upload_step(bucket, PREFIX, str(dest), 7) is None
    assert bucket.ops == before  # node 1 would otherwise upload node 0's model states as its own part


def test_local_steps_beyond_keep_last_are_removed_after_an_upload(bucket, tmp_path):
    for step in (1, 2, 3, 4):
        upload(bucket, tmp_path, step, 0, 1, keep_last=2)
    assert agent.complete_steps(str(tmp_path / "node0")) == [3, 4]
    assert sorted(p.name for p in (tmp_path / "node0").iterdir()) == ["step-00000003", "step-00000004"]


def test_a_part_already_durable_is_not_uploaded_again(bucket, tmp_path):
    """The agent uploaded node 1's part; the boot script's `sync` before a relaunch must not send it again
    (at 13B that is tens of GB per node)."""
    upload(bucket, tmp_path, 7, 1, 2)
    puts_before = [k for op, k in bucket.ops if op == "put"]
    assert agent.upload_step(bucket, PREFIX, str(tmp_path / "node1"), 7) is None
    assert [k for op, k in bucket.ops if op == "put"] == puts_before
    # a part that changed on disk since (another save of the same step) is uploaded again
    (tmp_path / "node1" / "step-00000007" / TAG / "zero_pp_rank_2_mp_rank_00_optim_states.pt").write_bytes(b"x")
    agent.upload_step(bucket, PREFIX, str(tmp_path / "node1"), 7)
    assert len([k for op, k in bucket.ops if op == "put"]) > len(puts_before)


def test_a_step_folder_without_complete_is_restored_again_even_when_its_files_look_right(bucket, tmp_path, capfd):
    """A trainer killed between renaming its temp folder and writing COMPLETE leaves files of the right sizes and
    no COMPLETE. Restore must not call that present: the trainer resumes only from folders with COMPLETE, so
    every node would start from different steps and the job would refuse to launch."""
    import shutil

    committed(bucket, tmp_path)
    dest = tmp_path / "d"
    shutil.copytree(tmp_path / "save7" / "node0" / "step-00000007", dest / "step-00000007")
    (dest / "step-00000007" / "COMPLETE").unlink()
    capfd.readouterr()
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=0, nodes=2) == 7
    assert '"restore_present"' not in capfd.readouterr().err
    assert json.loads((dest / "step-00000007" / "COMPLETE").read_text())["restored"] is True


def test_a_step_saved_again_by_a_later_run_is_uploaded_and_restored_as_that_run_wrote_it(bucket, tmp_path):
    """Issue 29 #1: run A's node 1 uploaded its part of step 7 and node 0 died before committing; run B resumed
    from an older step and saved step 7 again, same names and sizes, other bytes. Taking run A's part as "already
    durable" committed a step mixing both runs' shards, and a node whose disk still held run A's save reused it on
    restore. Now run B's part is uploaded and committed, and restore brings run B's bytes."""
    upload(bucket, tmp_path / "runA", 7, 1, 2)
    run_b = tmp_path / "runB"
    for node in (0, 1):
        save_part(run_b / f"node{node}", 7, node, 2)
    for f in run_b.rglob("*.pt"):
        f.write_bytes(f.read_bytes().swapcase())  # same sizes, other bytes
    wrote = {node: local_tree(run_b / f"node{node}" / "step-00000007") for node in (0, 1)}
    assert agent.upload_step(bucket, PREFIX, str(run_b / "node1"), 7) is None
    assert agent.upload_step(bucket, PREFIX, str(run_b / "node0"), 7) is not None  # commits
    for node in (0, 1):
        for rel, data in wrote[node].items():
            assert bucket.objects[f"{PREFIX}/step-00000007/node-{node}/{rel}"] == data, (node, rel)

    old_disk = tmp_path / "runA" / "node1"  # still holds run A's save of step 7, marked COMPLETE
    assert agent.restore(bucket, PREFIX, str(old_disk), node_rank=1, nodes=2) == 7
    model = f"{TAG}/mp_rank_00_model_states.pt"
    assert local_tree(old_disk / "step-00000007") == wrote[1] | {model: wrote[0][model]}


def test_restore_removes_what_killed_saves_conversions_and_restores_left(bucket, tmp_path):
    """Issue 29 #7: a save killed mid-write leaves `.tmp/step-N` (templates/train.py), a conversion killed mid-way
    `.convert-<step>-<pid>` (trainfleet-resize.py, a new pid each time), a restore `.restore-step-N-<pid>`: each as
    large as a part, never reused, filling the disk run after run. Restore (before the trainer and the conversion
    start) removes them; complete steps stay."""
    committed(bucket, tmp_path)
    dest = tmp_path / "node"
    for stale in (".tmp/step-00000009/global_step9/x.pt", ".convert-step-00000005-4242/step-00000005/y.pt",
                  ".restore-step-00000007-77/global_step7/z.pt"):  # fmt: skip
        (dest / stale).parent.mkdir(parents=True, exist_ok=True)
        (dest / stale).write_bytes(b"x" * 1000)
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=0, nodes=2) == 7
    assert sorted(p.name for p in dest.iterdir()) == ["step-00000007"]


def test_a_node_waits_for_node_0s_commit_before_it_restores(bucket, tmp_path):
    """Issue 29 #8: before a relaunch every node syncs, then restores. Node 1's small part was durable long before
    node 0's (the whole 16-bit model under ZeRO-1/2), so node 1 restored the previous step and deleted its own
    newer one while node 0 resumed from the newer step. Node 1's sync now waits for node 0's commit."""
    import threading

    upload(bucket, tmp_path, step=5, node=0, nodes=2)
    upload(bucket, tmp_path, step=5, node=1, nodes=2)  # step 5 committed: LATEST is 5
    save_part(tmp_path / "node1", 7, 1, 2)
    got = {}
    waiting = threading.Thread(
        target=lambda: got.setdefault("manifest", agent.upload_step(bucket, PREFIX, str(tmp_path / "node1"), 7,
                                                                    commit_wait_s=30))  # fmt: skip
    )
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive(), "node 1 returned before node 0 committed step 7"
    upload(bucket, tmp_path, step=7, node=0, nodes=2)  # node 0's part, then its commit
    waiting.join(30)
    assert got["manifest"]["step"] == 7 and agent.read_latest(bucket, PREFIX) == 7


def test_without_node_0s_commit_a_node_gives_up_after_the_wait(bucket, tmp_path):
    save_part(tmp_path / "node1", 7, 1, 2)
    assert agent.upload_step(bucket, PREFIX, str(tmp_path / "node1"), 7, commit_wait_s=0.5) is None


def test_the_agent_and_sync_never_upload_the_same_part_at_once(bucket, tmp_path, monkeypatch):
    """Issue 29 #8: the agent's watch loop and the boot script's `sync` both upload the newest step; both sent the
    whole part at once (twice the bytes, each at half the speed). The second waits for the first, then finds the
    part durable and sends nothing."""
    import threading

    from tests.agent_support import load_agent_module

    checkpoints = load_agent_module("checkpoints")
    ckpt = tmp_path / "node0"
    save_part(ckpt, 7, 0, 1)
    real, puts, first_in = checkpoints.upload_part, [], threading.Event()

    def slow_upload(*args):
        puts.append(args[3])
        first_in.set()
        threading.Event().wait(0.5)  # the other uploader arrives while this one is sending
        return real(*args)

    monkeypatch.setattr(checkpoints, "upload_part", slow_upload)
    other = threading.Thread(target=agent.ensure_part, args=(bucket, PREFIX, str(ckpt), 7))
    other.start()
    first_in.wait(10)
    assert agent.ensure_part(bucket, PREFIX, str(ckpt), 7) is False, "the second uploader sent the part again"
    other.join(10)
    assert puts == [7]


def pipeline_manifest() -> dict:
    """Two nodes of two ranks, a 2-stage pipeline (tp 1): ranks 0-1 are stage 0 (node 0), ranks 2-3 stage 1 (node 1);
    data-parallel rank 0 of each stage (ranks 0 and 2) writes the stage's layers and its mp_rank file. Names as
    DeepSpeed 0.19 writes them (pipe/module.py `ckpt_layer_path`, engine.py `_get_ckpt_name`,
    `_get_rank_zero_ckpt_name`), worked by hand."""
    def entry(path):
        return {"path": path, "size": 10, "checksum": "md5:" + "A" * 22 + "=="}

    node0 = ["layer_00-model_00-model_states.pt", "layer_01-model_00-model_states.pt", "mp_rank_00_model_states.pt",
             "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    node1 = ["layer_02-model_00-model_states.pt", "layer_03-model_00-model_states.pt", "mp_rank_01_model_states.pt",
             "bf16_zero_pp_rank_0_mp_rank_01_optim_states.pt", "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt"]
    return {"step": 7, "nodes": 2, "parts": [{"node": 0, "files": [entry(p) for p in node0]},
                                             {"node": 1, "files": [entry(p) for p in node1]}]}  # fmt: skip


def test_a_pipeline_node_fetches_only_its_own_stages_layers():
    """Each rank loads its own stage's layers only (DeepSpeed's `load_state_dir` over `forward_funcs`, its local
    layers), every mp_rank file (`_get_all_ckpt_names` globs them and the SD loader indexes into the list) and its own
    ZeRO shard. Node 1 fetched stage 0's layers too: at 70B on 4 stages, 140 GB per node where 35 GB is needed."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")  # its source, without the seconds an import of it takes
    assert spec is not None and spec.origin, "deepspeed is not installed: pip install -e '.[e2e]'"
    text = (Path(spec.origin).parent / "runtime/pipe/module.py").read_text()
    assert "for idx, layer in enumerate(self.forward_funcs):" in text and "layer_{idx:02d}-" in text
    got = sorted(e["path"] for _, e in agent.needed_files(pipeline_manifest(), 1))
    assert got == ["bf16_zero_pp_rank_0_mp_rank_01_optim_states.pt", "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt",
                   "layer_02-model_00-model_states.pt", "layer_03-model_00-model_states.pt",
                   "mp_rank_00_model_states.pt", "mp_rank_01_model_states.pt"]  # fmt: skip


def test_every_slice_of_a_layer_comes_together():
    """The SD loader takes the file at index mp_rank x files / mp_world_size of a layer's slices: a node holding
    only some slices would load another rank's. A layer of this node's stage comes with all its slices, whichever
    part holds them (tensor parallelism over 2 nodes: node 0 holds model_00's slice of stage 0, node 1 model_01's)."""
    def entry(path):
        return {"path": path, "size": 10, "checksum": "md5:" + "A" * 22 + "=="}

    node0 = ["layer_00-model_00-model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt", "mp_rank_00_model_states.pt"]
    node1 = ["layer_00-model_01-model_states.pt", "zero_pp_rank_0_mp_rank_01_optim_states.pt", "mp_rank_01_model_states.pt"]
    manifest = {"step": 7, "nodes": 2, "parts": [{"node": 0, "files": [entry(p) for p in node0]},
                                                 {"node": 1, "files": [entry(p) for p in node1]}]}  # fmt: skip
    got = sorted(e["path"] for _, e in agent.needed_files(manifest, 1))
    assert "layer_00-model_00-model_states.pt" in got and "layer_00-model_01-model_states.pt" in got


def test_a_checkpoint_that_does_not_say_its_stages_is_fetched_as_before():
    """No ZeRO shard naming model-parallel ranks (fp32 ZeRO-0 keeps the optimizer in the mp_rank files): every layer
    file is fetched, never too few."""
    manifest = pipeline_manifest()
    for part in manifest["parts"]:
        part["files"] = [e for e in part["files"] if "zero_pp_rank" not in e["path"]]
    got = {e["path"] for _, e in agent.needed_files(manifest, 1)}
    assert {"layer_00-model_00-model_states.pt", "layer_01-model_00-model_states.pt"} <= got


def test_node_0_never_commits_another_launchs_part_of_the_same_step(bucket, tmp_path):
    """Issue 29 #1, as the scale simulation found it left: launch A's node 1 made its part of step 7 durable and node
    0 was lost before committing; launch B saves step 7 again, node 1's new part is slow to go up. Node 0 committed
    step 7 with node 1's launch-A PART.json (same names and sizes) beside its own launch-B part. Each COMPLETE now
    names its save (train.py: `<launch id>:<step>`), PART.json carries it, and node 0 commits only its own save's
    parts; a node re-uploading a step first deletes the other save's PART.json."""
    a0, a1, b0, b1 = (tmp_path / n for n in ("a0", "a1", "b0", "b1"))
    save_part(a1, 7, 1, 2, save="aaaa:7")
    agent.upload_step(bucket, PREFIX, str(a1), 7)  # launch A's node 1: durable, never committed
    save_part(b0, 7, 0, 2, save="bbbb:7", salt=b"\x5a")
    save_part(b1, 7, 1, 2, save="bbbb:7", salt=b"\x5a")
    assert agent.upload_step(bucket, PREFIX, str(b0), 7) is None, "committed with launch A's part of node 1"
    assert agent.read_latest(bucket, PREFIX) is None
    agent.upload_step(bucket, PREFIX, str(b1), 7)
    manifest = agent.upload_step(bucket, PREFIX, str(b0), 7)
    assert manifest is not None and agent.read_latest(bucket, PREFIX) == 7
    dest = tmp_path / "restored"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest), node_rank=1, nodes=2) == 7
    assert local_tree(dest / "step-00000007") == local_tree(b1 / "step-00000007") | {
        k: v for k, v in local_tree(b0 / "step-00000007").items() if "zero_pp_rank" not in k}  # fmt: skip
