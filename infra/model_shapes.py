"""Named model shapes: parameters, layers, hidden size, heads, key/value heads, vocabulary, MLP width and kind.

The planner sizes memory and speed from them (cli/planner), and the node trains the same shape
(templates/trainfleet_model.py, from the model config infra/userdata.py renders). The mpt-* parameter counts are
the `NumParams` of the llm-foundry benchmark table (the calibration rows use these very presets); the llama and
mistral counts and key/value heads are those of the published checkpoints' config.json (Llama 2 70B, Llama 3 and
Mistral 7B use grouped-query attention with 8 key/value heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infra.units import format_count


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    params: int  # total parameters
    layers: int
    hidden: int  # d_model
    heads: int
    vocab: int
    ffn: int  # MLP inner width
    kv_heads: int = 0  # key/value heads; 0: as many as heads (multi-head attention)
    mlp: Literal["gelu", "swiglu"] = "gelu"  # GELU: two matrices h x ffn; SwiGLU: three
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    rope_theta: float = 10000.0  # rotary embedding base (Llama 3: 500,000)

    @property
    def key_value_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def layer_matrix_params(self) -> int:
        """Weights of one decoder layer's matrices: q and o (h x h), k and v (h x kv heads' width), and the MLP's
        two (GELU) or three (SwiGLU) h x ffn matrices. Norms and biases are left out (under 0.1%)."""
        h = self.hidden
        kv_width = h * self.key_value_heads // self.heads
        return 2 * h * h + 2 * h * kv_width + (3 if self.mlp == "swiglu" else 2) * h * self.ffn

    @property
    def largest_layer_params(self) -> int:
        """Parameters of the biggest single module (what ZeRO-3 must gather at once): the embedding or
        one MLP matrix, whichever is larger."""
        return max(self.vocab * self.hidden, self.hidden * self.ffn)


def llama(name: str, params: int, layers: int, hidden: int, heads: int, vocab: int, ffn: int, kv_heads: int = 0,
          rope_theta: float = 10000.0) -> ModelShape:  # fmt: skip
    """A shape of the Llama architecture (Mistral 7B's too): SwiGLU MLP, RMSNorm."""
    return ModelShape(name, params, layers, hidden, heads, vocab, ffn, kv_heads, "swiglu", "rmsnorm", rope_theta)


LLAMA3_ROPE = 500000.0

PRESETS: dict[str, ModelShape] = {
    s.name: s
    for s in [
        ModelShape("mpt-125m", 124_131_840, 12, 768, 12, 50368, 3072),
        ModelShape("mpt-350m", 354_412_544, 24, 1024, 16, 50368, 4096),
        ModelShape("mpt-760m", 758_111_232, 24, 1536, 12, 50368, 6144),
        ModelShape("mpt-1b", 1_312_804_864, 24, 2048, 16, 50368, 8192),
        ModelShape("mpt-3b", 2_647_905_280, 32, 2560, 20, 50368, 10240),
        ModelShape("mpt-7b", 6_652_567_552, 32, 4096, 32, 50368, 16384),
        ModelShape("mpt-13b", 12_846_090_240, 40, 5120, 40, 50368, 20480),
        ModelShape("mpt-30b", 29_975_214_080, 48, 7168, 56, 50368, 28672),
        ModelShape("mpt-70b", 64_862_437_376, 80, 8192, 64, 50368, 32768),
        llama("llama-7b", 6_738_415_616, 32, 4096, 32, 32000, 11008),
        llama("llama-13b", 13_015_864_320, 40, 5120, 40, 32000, 13824),
        llama("llama-70b", 68_976_648_192, 80, 8192, 64, 32000, 28672, kv_heads=8),
        llama("llama3-8b", 8_030_261_248, 32, 4096, 32, 128256, 14336, kv_heads=8, rope_theta=LLAMA3_ROPE),
        llama("llama3-70b", 70_553_706_496, 80, 8192, 64, 128256, 28672, kv_heads=8, rope_theta=LLAMA3_ROPE),
        llama("mistral-7b", 7_241_732_096, 32, 4096, 32, 32000, 14336, kv_heads=8),
    ]
}


def shape_for_params(params: int, vocab: int = 32000) -> ModelShape:
    """A dense-transformer shape for a bare parameter count (when no --model is given).

    Uses params ~= 12 * layers * hidden^2 + 2 * vocab * hidden with hidden ~= 128 * layers (the aspect ratio of the
    llama and mpt families), hidden rounded to a multiple of 128, and the Llama architecture the node trains
    (templates/trainfleet_model.py): a SwiGLU MLP as wide as Llama's rule makes it (2/3 of 4 x hidden, rounded up
    to a multiple of 256: 11008 at hidden 4096), RMSNorm, multi-head attention. Heads about 128 wide, their count
    a multiple of 8 that divides the hidden size, as in every published model of 1B and up (llama, mpt, mistral:
    16 to 128 heads), so tensor parallelism over 2, 4 or 8 devices splits them evenly (70B: hidden 9088, 64
    heads of 142, not 71 of 128).
    """
    layers = max(2, round((params / (12 * 128**2)) ** (1 / 3)))
    # 12 L h^2 in the layers and 2 V h in the embedding and output layer make the count (the embedding is 10% of a
    # 1.3B model): h is the positive root, so the model the node builds has about the parameters planned.
    root = (-2 * vocab + ((2 * vocab) ** 2 + 48 * layers * params) ** 0.5) / (24 * layers)
    hidden = max(128, round(root / 128) * 128)
    ffn = -(-8 * hidden // (3 * 256)) * 256
    name = f"{format_count(params)}-params"
    return llama(name, params, layers, hidden, heads_for(hidden), vocab, ffn)


def heads_for(hidden: int) -> int:
    """The multiple of 8 dividing `hidden` into heads of an even size (RoPE rotates pairs) nearest hidden / 128 (the
    smaller on a tie); hidden / 128 below 8."""
    if hidden < 8 * 128:
        return max(1, hidden // 128)
    counts = [n for n in range(8, hidden + 1, 8) if hidden % n == 0 and (hidden // n) % 2 == 0]
    return min(counts, key=lambda n: (abs(n - hidden / 128), n))


def job_shape(model: str | None, params: int) -> ModelShape:
    """The shape a stack's job trains: its `job.model` preset when it names one, else a shape for `job.params`."""
    return PRESETS.get((model or "").lower()) or shape_for_params(params)


def trainer_model_config(shape: ModelShape) -> dict:
    """The node trainer's model config (templates/trainfleet_model.py ModelConfig) for `shape`. The trainer builds
    the Llama architecture; a GELU shape (the mpt presets) becomes the SwiGLU MLP of the same parameters (2/3 of
    its width, rounded up to a multiple of 256, as Llama sizes its MLP)."""
    ffn = shape.ffn if shape.mlp == "swiglu" else -(-2 * shape.ffn // (3 * 256)) * 256
    return {
        "vocab_size": shape.vocab,
        "hidden": shape.hidden,
        "layers": shape.layers,
        "heads": shape.heads,
        "kv_heads": shape.key_value_heads,
        "ffn": ffn,
        "rope_theta": shape.rope_theta,
    }
