"""Which rank loads which file of a DeepSpeed checkpoint, by its name: the patterns the agent restores by
(checkpoints.py `needed_files`), in a module of their own so that the planner, which prices the same restores
(cli/planner/reliability.py), reads them without importing the agent's stores and HTTP client."""

from __future__ import annotations

import re

# DeepSpeed (0.19, runtime/engine.py `_load_checkpoint` and `_get_all_zero_checkpoint_state_dicts`): every rank
# loads the model states file(s) without a ZeRO rank in their name (`mp_rank_00_model_states.pt`, saved by data-
# parallel rank 0 under ZeRO-0/1/2), and only its own `zero_pp_rank_<dp rank>_...` files (optimizer states; under
# ZeRO-3 its parameter shard too), unless `elastic_checkpoint` is on. With bf16 on (the default precision) the
# optimizer shards are `bf16_zero_pp_rank_<dp rank>_...` (`_get_zero_ckpt_prefix`), and with NVMe optimizer
# offload each rank also saves and loads its own swap folder `offloaded_tensors/rank<rank>/`. So a node needs its
# own part plus the other parts' files that are not some other rank's shard or swap folder.
ZERO_SHARD_RE = re.compile(r"(^|/)((bf16_)?zero_pp_rank_\d+_[^/]*$|offloaded_tensors/rank\d+/)")


# A pipeline's weights (pipe/module.py `ckpt_layer_path`, `load_state_dir`): each rank loads only its own stage's
# layers, every tensor-parallel slice of each (`ckpt_layer_path_list` globs `layer_<idx>-*model_states.pt`, and the
# SD loader picks the file at index mp_rank x files / mp_world_size, so a layer's slices come all or none). The
# stage's layers are those its data-parallel rank 0 wrote: the part that also holds a `zero_pp_rank_0_mp_rank_<mp>`
# shard of one of this node's model-parallel ranks (`mp`: the rank within its replica's model group).
LAYER_RE = re.compile(r"(^|/)layer_(\d+)-[^/]*model_states\.pt$")
SHARD_MP_RE = re.compile(r"(^|/)(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
