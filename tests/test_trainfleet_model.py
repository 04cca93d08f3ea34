"""The node's model is the Llama architecture: held equal to Hugging Face transformers' LlamaForCausalLM.

transformers is the reference nobody here wrote: the same weights must give the same logits, loss and gradients
(eager attention on its side, SDPA on ours), with multi-head and grouped-query attention. The parameter count
of every Llama-family preset must be the published checkpoint's.
"""

from __future__ import annotations

import pytest

from tests.needs import need_module

torch = need_module("torch", "pip install -e '.[e2e]'")
transformers = need_module("transformers", "pip install -e '.[e2e]'")

from infra.model_shapes import PRESETS  # noqa: E402
from templates.trainfleet_model import CausalLM, ModelConfig, layer_builders, seeded  # noqa: E402


def hf_llama(config: ModelConfig):
    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden,
        intermediate_size=config.ffn,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads,
        rms_norm_eps=config.norm_eps,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    return transformers.LlamaForCausalLM(hf_config)


def hf_state_dict(ours: CausalLM, layers: int) -> dict:
    """Our names (layers.<i>.…: 0 the embedding, 1..L the decoder layers, L+1 norm + output) as transformers'."""
    out = {}
    for name, tensor in ours.state_dict().items():
        _, index, rest = name.split(".", 2)
        i = int(index)
        if i == 0:
            out[f"model.{rest}"] = tensor
        elif i == layers + 1:
            out[f"model.{rest}" if rest.startswith("norm.") else rest] = tensor
        else:
            out[f"model.layers.{i - 1}.{rest}"] = tensor
    return out


@pytest.mark.parametrize("kv_heads", [8, 2], ids=["multi-head", "grouped-query"])
def test_logits_loss_and_gradients_equal_transformers_llama(kv_heads):
    config = ModelConfig(vocab_size=300, hidden=64, layers=2, heads=8, kv_heads=kv_heads, ffn=176)
    ours = CausalLM(config, seed=7)
    reference = hf_llama(config)
    reference.load_state_dict(hf_state_dict(ours, config.layers), strict=True)
    tokens = torch.randint(0, config.vocab_size, (3, 41), generator=torch.Generator().manual_seed(0))

    ours_loss = ours(tokens[:, :-1], tokens[:, 1:])
    ref_out = reference(tokens[:, :-1], labels=tokens[:, :-1])  # transformers shifts the labels itself
    # …so its loss covers positions 0..39 predicting 1..39 (39 targets); ours predicts 1..40 (40): compare the
    # logits, and our loss against cross entropy over our 40 targets worked from its logits.
    assert torch.allclose(ours.logits(tokens[:, :-1]), ref_out.logits, atol=1e-5)
    expected = torch.nn.functional.cross_entropy(
        ref_out.logits.reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1)
    )
    assert ours_loss.item() == pytest.approx(expected.item(), rel=1e-5)

    ours_loss.backward()
    expected.backward()
    ref_grads = dict(reference.named_parameters())
    for name, grad in hf_state_dict_grads(ours, config.layers).items():
        assert torch.allclose(grad, ref_grads[name].grad, atol=1e-6), name


def hf_state_dict_grads(ours: CausalLM, layers: int) -> dict:
    grads = {name: p.grad for name, p in ours.named_parameters()}
    ours_names = hf_state_dict(ours, layers)  # same key order as ours.state_dict()
    return dict(zip(ours_names, grads.values(), strict=True))


def test_recompute_gives_the_same_gradients():
    config = ModelConfig(vocab_size=64, hidden=32, layers=2, heads=4, kv_heads=2, ffn=96)
    tokens = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(1))
    grads = []
    for recompute in (False, True):
        model = CausalLM(config, seed=3, recompute=recompute)
        model(tokens[:, :-1], tokens[:, 1:]).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for plain, rebuilt in zip(*grads, strict=True):
        assert torch.allclose(plain, rebuilt, atol=1e-6)


def test_each_layer_starts_from_its_own_seed_whatever_the_layout():
    """A pipeline builds only its stage's layers, each after seeding with (seed + index): the weights must be
    those CausalLM builds for that index."""
    config = ModelConfig(vocab_size=64, hidden=32, layers=3, heads=4, kv_heads=4, ffn=96)
    whole = CausalLM(config, seed=11)
    builders = layer_builders(config)
    seeded(11, 2)
    alone = builders[2]()  # the second decoder layer, built on its own as a later pipeline stage would
    for ours, theirs in zip(whole.layers[2].parameters(), alone.parameters(), strict=True):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("name", [n for n, s in PRESETS.items() if s.mlp == "swiglu"])
def test_presets_have_their_published_parameter_count(name):
    """The preset counts are the published checkpoints' (Llama 2 7B: 6,738,415,616); a ModelConfig of that shape
    must have exactly that many parameters, so the node trains the model the plan priced."""
    s = PRESETS[name]
    config = ModelConfig(s.vocab, s.hidden, s.layers, s.heads, s.key_value_heads, s.ffn)
    assert config.params == s.params


def test_the_parameter_count_is_what_torch_counts():
    config = ModelConfig(vocab_size=300, hidden=64, layers=2, heads=8, kv_heads=2, ffn=176)
    assert config.params == sum(p.numel() for p in CausalLM(config, seed=0).parameters())


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"hidden": 60, "heads": 8}, "not a multiple of heads"),
        ({"hidden": 24, "heads": 8}, "odd"),
        ({"heads": 8, "kv_heads": 3}, "kv_heads"),
    ],
)
def test_an_impossible_shape_is_refused_with_its_reason(fields, problem):
    base = {"vocab_size": 64, "hidden": 64, "layers": 1, "heads": 8, "kv_heads": 8, "ffn": 96}
    with pytest.raises(ValueError, match=problem):
        ModelConfig(**{**base, **fields})


def test_mfu_counts_flops_as_the_planner_does():
    """The node's MFU and the plan's must be one measure: llama-7b at 4096 tokens, 6 x 6,738,415,616 + 12 x 32 x
    4096 x 4096 = 40,430,493,696 + 6,442,450,944 FLOPs a token, the planner's Workload.flops_per_token."""
    from cli.planner.workload import Workload
    from templates.trainfleet_model import flops_per_token

    s = PRESETS["llama-7b"]
    config = ModelConfig(s.vocab, s.hidden, s.layers, s.heads, s.key_value_heads, s.ffn)
    assert flops_per_token(config, 4096) == 40_430_493_696 + 6_442_450_944
    assert flops_per_token(config, 4096) == Workload(s, 10**12, 4096).flops_per_token


@pytest.mark.parametrize("params, within", [(125e6, 0.10), (350e6, 0.10), (1.3e9, 0.05), (7e9, 0.05),
                                            (70e9, 0.05), (405e9, 0.05), (1e12, 0.05)])  # fmt: skip
def test_a_bare_parameter_count_builds_a_model_of_about_that_many(params, within):
    """`--params N` without a preset: the node builds the shape the planner priced (infra/model_shapes.py), whose
    parameters, embedding and output layer included, come within 5% of N from 1B up (10% below, where the hidden
    size's rounding to 128 is a larger step); every head has an even size for RoPE."""
    from infra.model_shapes import shape_for_params, trainer_model_config

    config = ModelConfig(**trainer_model_config(shape_for_params(int(params))))
    assert abs(config.params / params - 1) <= within
    assert config.head_dim % 2 == 0
