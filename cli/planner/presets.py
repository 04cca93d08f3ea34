"""Named model shapes for `--model`: parameters, layers, hidden size, heads, vocabulary, MLP width.

The mpt-* parameter counts are the `NumParams` of the llm-foundry benchmark table (the calibration
rows use these very presets); the llama/mistral counts are those of the published checkpoints.
"""

from __future__ import annotations

from infra.model_shapes import PRESETS, ModelShape, heads_for, shape_for_params

__all__ = ["LLMFOUNDRY_MODELS", "PRESETS", "ModelShape", "heads_for", "shape_for_params"]


# llm-foundry's table names its models 125m ... 70b; they are the mpt-* presets above.
LLMFOUNDRY_MODELS = {
    name.removeprefix("mpt-"): shape for name, shape in PRESETS.items() if name.startswith("mpt-")
}


