"""The communication settings of the ds_config every node launches with: one source of truth.

infra/userdata.py `ds_config()` writes these into `zero_optimization`, and the planner (cli/planner/memory.py)
sizes the device buffers DeepSpeed allocates for them. Change a value here and both follow.

Values are element counts, as DeepSpeed reads them (https://www.deepspeed.ai/docs/config-json/, ZeRO
optimizations): `reduce_bucket_size` "Number of elements reduced/allreduced at a time", default 5e8;
`allgather_bucket_size` "Number of elements allgathered at a time. Limits the memory required for the
allgather for large model sizes", default 5e8; `stage3_prefetch_bucket_size` default 5e7 (DeepSpeed 0.19.8,
deepspeed/runtime/zero/config.py). The buffer cost of `overlap_comm` is in cli/planner/memory.py.
"""

from __future__ import annotations

OVERLAP_COMM = True
CONTIGUOUS_GRADIENTS = True
# Element counts. The allgather and prefetch sizes are DeepSpeed's defaults, written out so that the planner's
# figure is the config's; the all-reduce bucket (ZeRO-0's gradient buckets) is DeepSpeed's default, not written.
REDUCE_BUCKET_SIZE = 500_000_000
ALLGATHER_BUCKET_SIZE = 500_000_000
STAGE3_PREFETCH_BUCKET_SIZE = 50_000_000
ALLREDUCE_BUCKET_SIZE = 500_000_000


def zero_communication(stage: int) -> dict:
    """The `zero_optimization` keys for the communication of a ZeRO stage (none for stage 0)."""
    if stage < 1:
        return {}
    out: dict = {
        "overlap_comm": OVERLAP_COMM,
        "contiguous_gradients": CONTIGUOUS_GRADIENTS,
        "reduce_bucket_size": REDUCE_BUCKET_SIZE,
    }
    if stage in (1, 2):
        out["allgather_bucket_size"] = ALLGATHER_BUCKET_SIZE
    else:
        out["stage3_prefetch_bucket_size"] = STAGE3_PREFETCH_BUCKET_SIZE
    return out
