"""Planted bugs in the planner's memory model (DeepSpeed's ZeRO estimators, activations, capacity): each one
either plans a job that runs out of memory on the node or rejects one that fits and costs more.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "planner-memory"
TESTS = [
    "tests/test_planner_rules.py",
    "tests/test_planner_memory.py", "tests/test_planner_reference.py", "tests/test_activation_memory.py"]
F = "cli/planner/memory.py"

MUTANTS = [
    {
        "file": F,
        "bug": "ZeRO-1/2 device memory uses DeepSpeed's pre-0.19 formula (4P + 16P/gpus)",
        "original": "gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)",
        "replacement": "gpu_mem = 4 * total_params + int(16 * total_params / total_gpus)",
    },
    {
        "file": F,
        "bug": "ZeRO-2 CPU offload host memory counts GPUs per node instead of all GPUs",
        "original": "cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor",
        "replacement": "cpu_mem = total_params * max(4 * num_gpus_per_node, 16) * additional_buffer_factor",
    },
    {
        "file": F,
        "bug": "ZeRO-3 host memory is divided over all GPUs instead of over nodes",
        "original": "gpus_factor = 1 / num_nodes",
        "replacement": "gpus_factor = 1 / total_gpus",
    },
    {
        "file": F,
        "bug": "ZeRO-3's largest layer is counted in 16-bit (2 bytes) where DeepSpeed counts 4",
        "original": "largest_layer_memory = 4 * largest_layer_params",
        "replacement": "largest_layer_memory = 2 * largest_layer_params",
    },
    {
        "file": F,
        "bug": "ZeRO-3 without offload shards model states over nodes, not over every GPU",
        "original": "gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)",
        "replacement": "gpu_mem = largest_layer_memory + int(18 * total_params / num_nodes)",
    },
    {
        "file": F,
        "bug": "ZeRO-3 optimizer offload forgets the 16-bit parameter shard on the device",
        "original": "gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)",
        "replacement": "gpu_mem = largest_layer_memory",
    },
    {
        "file": F,
        "bug": "host memory is never checked: CPU offload plans that swap or get OOM-killed",
        "original": "return host_capacity_bytes <= 0 or host_bytes <= host_capacity_bytes",
        "replacement": "return host_capacity_bytes <= 0 or host_bytes >= 0",
    },
    {
        "file": F,
        "bug": "the CUDA context / NCCL reserve is left out of device memory",
        "original": "return self.runtime_reserve_bytes + self.fragmentation_bytes",
        "replacement": "return self.fragmentation_bytes",
    },
    {
        "file": F,
        "bug": "with activation checkpointing the one layer being recomputed is not counted",
        "original": "rebuilt = per_layer if checkpointing else 0",
        "replacement": "rebuilt = 0",
    },
    {
        "file": F,
        "bug": "the loss's fp32 buffers count one per logit instead of three (4 bytes per logit, not 12)",
        "original": "LOSS_PEAK = 3 * F32",
        "replacement": "LOSS_PEAK = 1 * F32",
    },
    {
        "file": F,
        "bug": "a SwiGLU MLP is counted as a GELU one (2 inner tensors kept, not 4): Llama plans that run out of memory",
        "original": "mlp = (4 if shape.mlp == \"swiglu\" else 2) * A16 * s * shape.ffn",
        "replacement": "mlp = 2 * A16 * s * shape.ffn",
    },
    {
        "file": F,
        "bug": "grouped-query attention's k and v are counted at every head's width, not the key/value heads'",
        "original": "h, kv_width = shape.hidden, shape.hidden * shape.key_value_heads // shape.heads",
        "replacement": "h, kv_width = shape.hidden, shape.hidden",
    },
    {
        "file": F,
        "bug": "activations do not grow with the micro batch",
        "original": "return b * max(first, last)",
        "replacement": "return max(first, last)",
    },
    {
        "file": F,
        "bug": "allocator fragmentation is ignored: the whole device memory counts as usable",
        "original": "fragmentation_bytes=int(device * FRAGMENTATION),",
        "replacement": "fragmentation_bytes=0,",
    },
    {
        "file": F,
        "bug": "offloaded states may take all of the node's RAM (nothing left for the OS and data loader)",
        "original": "return int(host_memory_gib * GIB * HOST_USABLE)",
        "replacement": "return int(host_memory_gib * GIB)",
    },
    {
        "file": F,
        "bug": "LoRA without ZeRO-3 forgets the frozen 16-bit base weights on every device",
        "original": "frozen_gpu = 2 * params",
        "replacement": "frozen_gpu = 0 * params",
    },
    {
        "file": F,
        "bug": "ZeRO-0 (plain data parallel) is estimated as if sharded over every GPU",
        "original": "estimate_zero2_model_states_mem_needs(trained, 1, 1, cpu_offload=False)",
        "replacement": "estimate_zero2_model_states_mem_needs(trained, gpus_per_node, nodes, cpu_offload=False)",
    },
    {
        "file": F,
        "bug": "LoRA is sized as a full fine-tune (every parameter trained)",
        "original": "if w.method == \"full\":\n        return rank_params(w, tp, pp)",
        "replacement": "if True:\n        return rank_params(w, tp, pp)",
    },
    {
        "file": F,
        "bug": "ZeRO-3 with param offload keeps its frozen LoRA base on the device anyway",
        "original": "                frozen_gpu = 2 * full_largest",
        "replacement": "                pass",
    },
    # Issue 14 item 1: ZeRO-1 keeps whole gradients; the ds_config's buffers; the headroom every plan keeps.
    {
        "file": F,
        "bug": "ZeRO-1 is sized like ZeRO-2 (its gradients taken as partitioned): the quick-start plan ran out of memory",
        "original": "    return cpu, 2 * total_params + 2 * total_params + int(16 * total_params / total_gpus)",
        "replacement": "    return cpu, 2 * total_params + int(18 * total_params / total_gpus)",
    },
    {
        "file": F,
        "bug": "overlap_comm's buffers (4.5x the bucket sizes) are not counted",
        "original": "OVERLAP_COMM_FACTOR = 4.5",
        "replacement": "OVERLAP_COMM_FACTOR = 0.0",
    },
    {
        "file": F,
        "bug": "the headroom is not kept: a plan may fill the device",
        "original": "return self.device_memory_bytes - math.ceil(self.headroom * self.device_memory_bytes)",
        "replacement": "return self.device_memory_bytes",
    },
]
