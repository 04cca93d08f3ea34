"""Planted bugs in tensor x pipeline x data parallelism: which layouts the planner tries (cli/planner/optimizer.py),
what a sequence-parallel rank keeps (cli/planner/memory.py), what the ds_config tells the trainer
(infra/userdata.py), and the trainer's own tensor- and sequence-parallel layers (templates/trainfleet_model.py).
Each one plans a layout the launch cannot run, prices memory the launch does not use, or trains a different model
than the one the plan priced.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once). The layer
mutants need the e2e extra (torch): run them with `--python /path/to/venv-with-torch/bin/python`."""

MODULE = "three-d-layouts"
# No end-to-end DeepSpeed runs here (tests/conftest.py runs the longest first, minutes a mutant): the plan, memory
# and render tests, and the layers against the whole layer.
TESTS = ["tests/test_planner_parallelism_math.py", "tests/test_planner_layouts.py"]
LAYOUT_TESTS = ["tests/test_planner_layouts.py", "tests/test_planner_reference.py"]
RENDER_TESTS = ["tests/test_deepspeed_parallelism.py"]
NOT_LAUNCHED = "not layout_trains and not autotp_trains and not cannot_run and not refuses_a_pipeline"
OPT = "cli/planner/optimizer.py"
MEM = "cli/planner/memory.py"
PAR = "infra/parallelism.py"
RENDER = "infra/userdata.py"
MODEL = "templates/trainfleet_model.py"
LAYER_TESTS = ["tests/test_tensor_parallel_layers.py"]

THROUGHPUT = "cli/planner/throughput.py"

MUTANTS = [
    {
        "file": THROUGHPUT,
        "bug": "a pipeline is priced as perfectly balanced: the output head's stage no slower than the others",
        "original": "    slowest = max((whole + (extra > 0)) * layer, whole * layer + head)",
        "replacement": "    slowest = (layers * layer + head) / pp",
    },
    {
        "file": THROUGHPUT,
        "bug": "the extra layers of an uneven split are put on the head's stage, not the first ones (as DeepSpeed does)",
        "original": "    slowest = max((whole + (extra > 0)) * layer, whole * layer + head)",
        "replacement": "    slowest = (whole + (extra > 0)) * layer + head",
    },
    {
        "file": THROUGHPUT,
        "bug": "the layout efficiency is raised past what the development runs allow",
        "original": "LAYOUT_EFFICIENCY = 0.74",
        "replacement": "LAYOUT_EFFICIENCY = 0.78",
    },
    {
        "file": PAR,
        "bug": "the launch is taken to run no sequence parallelism in 3-D: the planner prices norms it does not keep",
        "original": "    return tp > 1 and pp > 1",
        "replacement": "    return False",
    },
    {
        "file": OPT,
        "bug": "3-D layouts whose sequence does not split over the tensor ranks are offered",
        "original": "if unsupported_layout(tp, pp) is None and sequence_split_error(tp, pp, w.seq_len) is None]",
        "replacement": "if unsupported_layout(tp, pp) is None]",
        "tests": LAYOUT_TESTS,
        "k": "every_split or reference",
    },
    {
        "file": OPT,
        "bug": "tensor and pipeline parallelism are never tried together again",
        "original": "return [(tp, pp) for pp in pps for tp in tps",
        "replacement": "return [(tp, pp) for pp in pps for tp in tps if tp == 1 or pp == 1",
        "tests": LAYOUT_TESTS,
        "k": "every_split or reference",
    },
    {
        "file": MEM,
        "bug": "a norm's gathered output is taken as split too (Megatron keeps the shard; this launch does not)",
        "original": "return 2 * (_ceil_div(norm_bytes(shape, s) - gathered, tp) + gathered) + split",
        "replacement": "return 2 * _ceil_div(norm_bytes(shape, s), tp) + split",
    },
    {
        "file": MEM,
        "bug": "with recompute a 3-D layer keeps its whole input, not its rank's positions",
        "original": "stored = (_ceil_div(A16 * s * h, tp) if sp else A16 * s * h) if checkpointing else per_layer",
        "replacement": "stored = A16 * s * h if checkpointing else per_layer",
    },
    {
        "file": RENDER,
        "bug": "a sequence-parallel pipeline's stage hand-offs are split over the tensor ranks as if alike",
        "original": "out[\"pipeline\"].update(tensor_parallel=tp, sequence_parallel=True, pipe_partitioned=False,",
        "replacement": "out[\"pipeline\"].update(tensor_parallel=tp, sequence_parallel=True, pipe_partitioned=True,",
        "tests": RENDER_TESTS,
        "k": NOT_LAUNCHED,
    },
    {
        "file": RENDER,
        "bug": "AutoTP's section rendered inside a pipeline, which DeepSpeed cannot shard",
        "original": "    if tp > 1 and pp == 1:\n        # AutoTP training",
        "replacement": "    if tp > 1:\n        # AutoTP training",
        "tests": RENDER_TESTS,
        "k": NOT_LAUNCHED,
    },
    {
        "file": MODEL,
        "bug": "a block's input gradient is not summed over the tensor ranks (Megatron's f without its all-reduce)",
        "original": "_EnterTensorParallel = _paired(\"_EnterTensorParallel\", as_is, sum_over_group,",
        "replacement": "_EnterTensorParallel = _paired(\"_EnterTensorParallel\", as_is, as_is,",
        "tests": LAYER_TESTS,
    },
    {
        "file": MODEL,
        "bug": "a sequence-parallel norm's weight keeps only its rank's share of the gradient",
        "original": "                    norm.weight.register_hook(partial(sum_over_group, tp=self.tp))",
        "replacement": "                    pass",
        "tests": LAYER_TESTS,
    },
    {
        "file": MODEL,
        "bug": "entering a sequence-parallel block, the input gradient keeps this rank's positions without the sum",
        "original": "_EnterSequenceParallel = _paired(\"_EnterSequenceParallel\", gather_sequence, reduce_scatter_sequence,",
        "replacement": "_EnterSequenceParallel = _paired(\"_EnterSequenceParallel\", gather_sequence, own_positions,",
        "tests": LAYER_TESTS,
    },
    {
        "file": MODEL,
        "bug": "the row-parallel projections keep output rows: every rank's partial sum is over the wrong inputs",
        "original": "                self.tp.keep(row, dim=1)",
        "replacement": "                self.tp.keep(row, dim=0)",
        "tests": LAYER_TESTS,
    },
]
