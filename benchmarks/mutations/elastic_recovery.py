"""Planted bugs in elastic recovery (issue 15): each one shrinks a job to a size that cannot keep its global batch,
loads a converted checkpoint as a plain one, restores a part too few to convert, or prices elastic recovery
cheaper than it is.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "elastic-recovery"
TESTS = ["tests/test_elastic_node.py", "tests/test_agent_sharded.py", "tests/test_planner_elastic.py",
         "tests/test_config.py"]  # fmt: skip
RESIZE = "templates/node/trainfleet-resize.py"
RESTORE = "templates/agent/trainfleet_agent/checkpoints.py"

MUTANTS = [
    {
        "file": RESIZE,
        "bug": "the launch keeps the stack's accumulation on fewer nodes: DeepSpeed refuses the global batch",
        "original": 'config["gradient_accumulation_steps"] = batch // (micro * dp)',
        "replacement": 'config["gradient_accumulation_steps"] = config["gradient_accumulation_steps"]',
    },
    {
        "file": RESIZE,
        "bug": "a universal checkpoint is loaded without checkpoint.load_universal",
        "original": '        checkpoint["load_universal"] = True',
        "replacement": "        pass",
    },
    {
        "file": RESIZE,
        "bug": "a step saved by this very node count is converted anyway",
        "original": "if not universal and saved_by != a.nodes and shards:",
        "replacement": "if not universal and shards:",
    },
    {
        "file": RESTORE,
        "bug": "a resize restores only this node's part: the converter lacks the other ranks' ZeRO shards",
        "original": "needed = manifest_objects(manifest) if whole else needed_files(manifest, node_rank)",
        "replacement": "needed = needed_files(manifest, node_rank)",
    },
    {
        "file": RESTORE,
        "bug": "a step this node already converted is fetched and converted again at every relaunch",
        "original": 'if whole and complete and marker.get("universal"):',
        "replacement": "if False:",
    },
    {
        "file": "templates/node/trainfleet-boot.sh.j2",
        "bug": "the boot script shrinks to the smallest allowed size, not the largest the group holds",
        "original": '[ "$size" -gt "${best:-0}" ]',
        "replacement": '[ -z "$best" ]',
    },
    {
        "file": "infra/elastic.py",
        "bug": "the stack's own node count counts as a size to shrink to",
        "original": "return [n for n in range(max(1, min_nodes), nodes) if (grad_accum * nodes) % n == 0]",
        "replacement": "return [n for n in range(max(1, min_nodes), nodes + 1) if (grad_accum * nodes) % n == 0]",
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "the planner forgets the conversion back when the replacement arrives",
        "original": "s_w * (shrink + grow)",
        "replacement": "s_w * shrink",
    },
    {
        "file": RESIZE,
        "bug": "a node count that cannot keep the global batch launches anyway (with a rounded accumulation)",
        "original": "if dp < 1 or batch % (micro * dp):",
        "replacement": "if dp < 1:",
    },
    {
        "file": "templates/node/trainfleet-boot.sh.j2",
        "bug": "a full set of the stack's nodes still runs shrunk",
        "original": 'if [ "$members" -ge "$TRAINFLEET_NODES" ]; then',
        "replacement": 'if [ "$members" -gt "$TRAINFLEET_NODES" ]; then',
    },
    {
        "file": "infra/config.py",
        "bug": "the schema lets elastic recovery on a tensor- or pipeline-parallel job, which ds_to_universal here does not convert",
        "original": "if (ds.tensor_parallel, ds.pipeline_parallel) != (1, 1):",
        "replacement": "if False:",
    },
]
