"""The planner's activation memory (cli/planner/memory.py) held to a measurement of the model the node trains.

What a layer costs between its forward and its backward is what autograd saves for the backward. It is measured
here on CPU, in bf16 the way DeepSpeed's bf16 trains (the module and its inputs cast to bfloat16; no autocast),
with torch.autograd.graph.saved_tensors_hooks: every tensor saved, each storage counted once (views of one
tensor share it), the parameters' storages left out (Linear and the norms' weight multiply save the weights too;
those are model states, not activations).

 - templates/trainfleet_model.py's DecoderLayer (the Llama architecture: RMSNorm, RoPE, grouped-query attention
   through scaled_dot_product_attention, SwiGLU), per layer as two layers less one, with and without full
   recompute; with recompute also the layer the backward rebuilds (what torch.utils.checkpoint's recomputation
   saves, recorded beside it);
 - its output head and loss (OutputHead + lm_loss): the peak of the live tensors from its forward through its
   backward (a TorchDispatchMode watching every storage the ops create), since the loss's transient fp32
   tensors, not what it saves, set its peak;
 - Hugging Face transformers' GPT2Block (GELU MLP, LayerNorm, multi-head attention), with attn_implementation
   "sdpa": an implementation nobody here wrote, for the planner's GELU/LayerNorm count (the mpt-* presets).
   transformers' MptBlock is not used: its attention is eager only and materialises the s x s scores.

CPU stands for GPU: on CPU, scaled_dot_product_attention runs bf16 through
_scaled_dot_product_flash_attention_for_cpu (asserted below), whose autograd node saves query, key, value, output
and logsumexp; on CUDA the flash kernel's node (_scaled_dot_product_flash_attention) saves the same five
(torch/csrc/autograd/generated/Functions.h, ScaledDotProductFlashAttentionForCpuBackward0 and
ScaledDotProductFlashAttentionBackward0: query_, key_, value_, output_, logsumexp_; the CUDA node's cumulative
sequence lengths and RNG state are empty or a few bytes for dense input without dropout), and both take
grouped-query key/value at their own head count (scaled_dot_product_attention's documentation: GQA works with
the flash and math kernels on CUDA; math would repeat k and v and keep the s x s scores, flash does not). The
rest of a layer is matmuls and elementwise ops whose saved tensors do not depend on the device.

The planner's figure is a count of those tensors from the architecture, not a fit: every measured figure must be
within 10% of it (the table prints with `pytest -s`). The few bytes it leaves out are named in its docstring
(RoPE's cos/sin tables, a few per cent of these small layers, well under 1% of a real one).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.needs import need_module

torch = need_module("torch", "pip install -e '.[e2e]'")
transformers = need_module("transformers", "pip install -e '.[e2e]'")

import torch.utils.checkpoint as torch_checkpoint  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from cli.planner import memory  # noqa: E402
from cli.planner.workload import Workload  # noqa: E402
from infra.model_shapes import ModelShape  # noqa: E402
from templates.trainfleet_model import DecoderLayer, ModelConfig, OutputHead, lm_loss  # noqa: E402

BF16 = torch.bfloat16
TOLERANCE = 0.10


# --- measuring ---------------------------------------------------------------------------------------------


def storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def recorder(params, saved: dict[int, int]):
    """A pack hook that notes each saved tensor's storage (address -> bytes), once, unless a parameter's."""
    weights = {storage_key(p) for p in params}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if key not in weights:
            saved.setdefault(key, t.untyped_storage().nbytes())
        return t  # kept by autograd until the backward: no address is freed and reused while counting

    return pack


def saved_bytes(run, params) -> tuple[int, object]:
    """Bytes of the distinct storages autograd saves for backward while `run()` executes, and its result."""
    saved: dict[int, int] = {}
    with torch.autograd.graph.saved_tensors_hooks(recorder(params, saved), lambda t: t):
        out = run()
    return sum(saved.values()), out


class LivePeak(TorchDispatchMode):
    """The most bytes alive at once, after each op, of the storages the ops create (parameters and the given
    inputs excluded; the parameters' gradients, model states, taken out at the end)."""

    def __init__(self, exclude):
        super().__init__()
        self.exclude = {storage_key(t) for t in exclude}
        self.entries: list[tuple[StorageWeakRef, int, int]] = []  # (storage, bytes, address)
        self.latest: dict[int, int] = {}  # address -> its newest entry
        self.alive_after_op: list[list[int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage, key = t.untyped_storage(), storage_key(t)
                newest = self.latest.get(key)
                if key not in self.exclude and (newest is None or self.entries[newest][0].expired()):
                    self.latest[key] = len(self.entries)
                    self.entries.append((StorageWeakRef(storage), storage.nbytes(), key))
        self.alive_after_op.append([i for i, e in enumerate(self.entries) if not e[0].expired()])
        return out

    def peak(self, params) -> int:
        grads = {storage_key(p.grad) for p in params if p.grad is not None}
        grad_entries = {i for i, e in enumerate(self.entries) if not e[0].expired() and e[2] in grads}
        return max(sum(self.entries[i][1] for i in alive if i not in grad_entries) for alive in self.alive_after_op)


def llama_stack(config: ModelConfig, layers: int, recompute: bool) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(DecoderLayer(config, recompute) for _ in range(layers))).to(BF16)


def hidden_input(b: int, s: int, h: int) -> torch.Tensor:
    return torch.randn(b, s, h, generator=torch.Generator().manual_seed(1)).to(BF16).requires_grad_()


def per_layer_saved(build, b: int, s: int, h: int) -> int:
    """Saved bytes of one layer: a stack of two less a stack of one, from the same leaf input."""
    totals = []
    for layers in (1, 2):
        stack = build(layers)
        x = hidden_input(b, s, h)
        totals.append(saved_bytes(lambda: stack(x), list(stack.parameters()))[0])  # noqa: B023
    return totals[1] - totals[0]


def rebuilt_layer_saved(config: ModelConfig, b: int, s: int, monkeypatch) -> list[int]:
    """What the backward's recomputation saves for each rebuilt layer: torch.utils.checkpoint's recomputation
    hook, wrapped to note every tensor it stores before passing it on (nested saved-tensor hooks do not stack, so
    the one hook that sees them is the checkpoint's own)."""
    stack = llama_stack(config, 2, recompute=True)
    params = list(stack.parameters())
    rebuilt: list[dict[int, int]] = []
    original = torch_checkpoint._recomputation_hook

    class Recording(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args):
            super().__init__(*args)
            saved: dict[int, int] = {}
            rebuilt.append(saved)
            note, store = recorder(params, saved), self.pack_hook

            def pack(t):
                note(t)
                return store(t)

            self.pack_hook = pack

    monkeypatch.setattr(torch_checkpoint, "_recomputation_hook", Recording)
    x = hidden_input(b, s, config.hidden)
    stack(x).float().sum().backward()
    return [sum(saved.values()) for saved in rebuilt]


def head_peak(config: ModelConfig, b: int, s: int) -> int:
    """The peak of the output head + loss, forward through backward (the input and labels not counted)."""
    torch.manual_seed(0)
    head = OutputHead(config).to(BF16)
    x = hidden_input(b, s, config.hidden)
    labels = torch.randint(0, config.vocab_size, (b, s), generator=torch.Generator().manual_seed(2))
    params = list(head.parameters())
    watch = LivePeak([*params, x, labels])
    with watch:
        lm_loss(head(x), labels).backward()
    return watch.peak(params)


# --- the cases ---------------------------------------------------------------------------------------------


def llama_ffn(h: int) -> int:
    """Llama's MLP width rule (infra/model_shapes.shape_for_params): 2/3 of 4h rounded up to 256."""
    return -(-8 * h // (3 * 256)) * 256


@dataclass(frozen=True)
class Case:
    hidden: int
    heads: int
    kv_heads: int
    seq: int
    micro_batch: int
    ffn: int
    recompute: bool
    vocab: int = 2000

    @property
    def name(self) -> str:
        return (f"h{self.hidden} a{self.heads} kv{self.kv_heads} s{self.seq} b{self.micro_batch} f{self.ffn}"
                f"{' recompute' if self.recompute else ''}")  # fmt: skip

    def config(self) -> ModelConfig:
        return ModelConfig(vocab_size=self.vocab, hidden=self.hidden, layers=2, heads=self.heads,
                           kv_heads=self.kv_heads, ffn=self.ffn)  # fmt: skip

    def shape(self, **arch) -> ModelShape:
        return ModelShape(self.name, 10**9, 2, self.hidden, self.heads, self.vocab, self.ffn,
                          kv_heads=self.kv_heads, **arch)  # fmt: skip


LLAMA = {"mlp": "swiglu", "norm": "rmsnorm"}
CASES = [
    Case(256, 4, 4, 64, 1, llama_ffn(256), False),
    Case(256, 8, 2, 256, 2, llama_ffn(256), False),
    Case(512, 8, 8, 64, 2, llama_ffn(512), False),
    Case(512, 4, 1, 256, 1, 1000, False),
    Case(256, 8, 8, 256, 1, 1024, True),
    Case(512, 8, 2, 64, 2, llama_ffn(512), True),
    Case(512, 4, 4, 256, 2, 2048, True),
    Case(256, 4, 1, 64, 1, llama_ffn(256), True),
]
GELU_CASES = [  # GPT2Block: multi-head attention only
    Case(256, 4, 4, 64, 1, 1024, False),
    Case(512, 8, 8, 256, 2, 2048, False),
    Case(512, 4, 4, 128, 1, 1536, False),
]


def llama_rows(case: Case, monkeypatch) -> list[tuple[str, int, int]]:
    """(what, measured bytes, planned bytes) for one case of the node's model."""
    config, shape, b, s, h = case.config(), case.shape(**LLAMA), case.micro_batch, case.seq, case.hidden
    layer = b * memory.layer_bytes(shape, s)
    rows = []
    if case.recompute:
        kept = per_layer_saved(lambda n: llama_stack(config, n, True), b, s, h)
        rows.append(("layer input kept (recompute)", kept, b * memory.A16 * s * h))
        for rebuilt in rebuilt_layer_saved(config, b, s, monkeypatch):
            rows.append(("layer rebuilt in backward", rebuilt, layer))
    else:
        rows.append(("layer", per_layer_saved(lambda n: llama_stack(config, n, False), b, s, h), layer))
    rows.append(("output head + loss, peak", head_peak(config, b, s), b * memory.head_bytes(shape, s)))
    return rows


def gpt2_block(case: Case) -> torch.nn.Module:
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = transformers.GPT2Config(
        n_embd=case.hidden, n_head=case.heads, n_inner=case.ffn, n_positions=case.seq, activation_function="gelu",
        resid_pdrop=0.0, attn_pdrop=0.0, embd_pdrop=0.0, attn_implementation="sdpa",
    )  # fmt: skip
    assert config._attn_implementation == "sdpa"
    return GPT2Block(config, layer_idx=0)


def gelu_rows(case: Case) -> list[tuple[str, int, int]]:
    def build(layers: int) -> torch.nn.Sequential:
        torch.manual_seed(0)
        return torch.nn.Sequential(*(gpt2_block(case) for _ in range(layers))).to(BF16).train()

    measured = per_layer_saved(build, case.micro_batch, case.seq, case.hidden)
    planned = case.micro_batch * memory.layer_bytes(case.shape(), case.seq)
    return [("GPT2Block layer (GELU, LayerNorm)", measured, planned)]


def check(rows, label: str) -> None:
    lines = []
    for what, measured, planned in rows:
        ratio = measured / planned
        lines.append(f"{label:<42} {what:<32} {measured:>11,} {planned:>11,} {ratio:6.3f}")
        assert abs(ratio - 1) <= TOLERANCE, lines[-1]
    print("\n" + "\n".join(lines))


# --- the tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_node_model_keeps_what_the_planner_counts(case, monkeypatch):
    check(llama_rows(case, monkeypatch), case.name)


@pytest.mark.parametrize("case", GELU_CASES, ids=lambda c: c.name)
def test_a_gelu_layernorm_block_keeps_what_the_planner_counts(case):
    check(gelu_rows(case), case.name)


def test_cases_cover_the_combinations():
    assert {c.hidden for c in CASES} == {256, 512} and {c.heads for c in CASES} == {4, 8}
    assert {c.kv_heads == c.heads for c in CASES} == {True, False}
    assert {c.kv_heads * 4 == c.heads for c in CASES} == {True, False}
    assert {c.seq for c in CASES} == {64, 256} and {c.micro_batch for c in CASES} == {1, 2}
    assert {c.ffn == llama_ffn(c.hidden) for c in CASES} == {True, False}
    assert {c.recompute for c in CASES} == {True, False}


@pytest.mark.parametrize("kv_heads", [8, 2], ids=["multi-head", "grouped-query"])
def test_cpu_attention_is_the_flash_kernel_and_keeps_no_score_matrix(kv_heads):
    """The measurement stands for a GPU only if the CPU runs a flash kernel: its autograd node is in the graph,
    and no saved tensor is s x s (the scores the math kernel would keep); k and v are saved at kv_heads."""
    s, b, h, heads = 128, 1, 256, 8
    config = ModelConfig(vocab_size=100, hidden=h, layers=1, heads=heads, kv_heads=kv_heads, ffn=512)
    layer = llama_stack(config, 1, False)
    x = hidden_input(b, s, h)
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    seen, todo = [], [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and not any(node is n for n in seen):
            seen.append(node)
            todo += [n for n, _ in node.next_functions]
    assert "ScaledDotProductFlashAttentionForCpuBackward0" in {n.name() for n in seen}
    assert not any(len(shape) >= 2 and shape[-2:] == (s, s) for shape in shapes)
    assert (b, kv_heads, s, h // heads) in shapes  # k and v at their own head count
    assert (b, heads, s) in shapes  # the fp32 logsumexp


def test_recompute_keeps_each_layer_input_and_rebuilds_a_whole_layer(monkeypatch):
    """With recompute each layer keeps exactly its 16-bit input, and its rebuild saves what a plain layer saves."""
    case = Case(256, 8, 2, 64, 2, llama_ffn(256), True)
    config = case.config()
    plain = per_layer_saved(lambda n: llama_stack(config, n, False), 2, 64, 256)
    assert per_layer_saved(lambda n: llama_stack(config, n, True), 2, 64, 256) == 2 * 2 * 64 * 256
    assert rebuilt_layer_saved(config, 2, 64, monkeypatch) == [plain, plain]


@pytest.mark.parametrize("case", [CASES[1], CASES[3]], ids=lambda c: c.name)
def test_the_count_leaves_out_only_the_bytes_it_names(case):
    """Not just within 10%: what the count leaves out of a layer is exactly RoPE's cos and sin tables (16-bit,
    s x head size each, once per layer whatever the micro batch), of the head and loss a few scalars; the GELU
    block keeps LayerNorm's mean and 1/std in bf16 on CPU where the count takes CUDA's fp32 (2 x 2 bytes a token
    more per norm)."""
    config, shape, b, s, h = case.config(), case.shape(**LLAMA), case.micro_batch, case.seq, case.hidden
    measured = per_layer_saved(lambda n: llama_stack(config, n, False), b, s, h)
    assert measured - b * memory.layer_bytes(shape, s) == 2 * 2 * s * (h // case.heads)
    assert 0 <= head_peak(config, b, s) - b * memory.head_bytes(shape, s) <= 16
    gelu = Case(h, case.heads, case.heads, s, b, 4 * h, False)
    (_, measured, planned), = gelu_rows(gelu)
    assert planned - measured == 2 * 2 * (4 - 2) * s * b


def test_the_planner_counts_term_by_term_for_llama_7b():
    """llama-7b, s = 2048, one sequence: 45.5 sh per layer (+ 8s for the two 1/rms, 4sa logsumexp) and a 12-byte
    loss peak per logit, worked by hand from the docstring's terms; a pipeline's last stage adds 2 bytes a logit
    for each of the two micro-batches whose 16-bit logits it keeps (one when there is only one)."""
    from cli.planner.presets import PRESETS

    shape, s, h, a, f, v = PRESETS["llama-7b"], 2048, 4096, 32, 11008, 32000
    w = Workload(shape, 10**9, s)
    norm = 4 * s * h + 4 * s + 2 * s * h + 2 * s * h
    attention = 2 * s * h + 2 * 2 * s * h + 2 * s * h + 4 * s * a
    layer = 2 * norm + attention + 4 * 2 * s * f
    assert memory.norm_bytes(shape, s) == norm == 67_117_056
    assert memory.layer_bytes(shape, s) == layer == 381_960_192 == 45.5 * s * h + 8 * s + 4 * s * a
    assert memory.head_bytes(shape, s) == norm + 12 * s * v
    assert memory.head_bytes(shape, s, kept_logits=2) == norm + 16 * s * v
    assert memory.activation_bytes(w, 1, False) == 32 * layer + norm + 12 * s * v
    assert memory.activation_bytes(w, 1, True) == 32 * 2 * s * h + layer + norm + 12 * s * v
    # two stages of 16 layers: the first holds 2 micro-batches' layers (1F1B), the last one's and the head
    assert memory.activation_bytes(w, 1, False, pp=2) == 2 * 16 * layer
    assert memory.activation_bytes(w, 1, False, pp=2, grad_accum=1) == 16 * layer + norm + 14 * s * v
    assert memory.activation_bytes(w, 1, True, pp=2, grad_accum=2) == 16 * 2 * s * h + layer + norm + 16 * s * v
