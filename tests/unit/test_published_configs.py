"""Real checkpoints' config.json files, as published on the Hugging Face hub, read by
LlamaConfig: the README's pairs (SmolLM2, Qwen2.5) and Llama 3.2 are accepted with every
key they carry, and the parameter counts the code derives from them are the model cards'.
The memory the README quotes for each pair is computed here from the same configs."""

import re
from pathlib import Path

import pytest

from reference.config import LlamaConfig
from specdec.text import memory_to_run, parameter_count

ROOT = Path(__file__).resolve().parents[2]

# the keys of each published config.json (the ones NOT read are kept too: they must not
# trip a refusal), values as the files have them
SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "silu",
    "is_llama_config": True,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "model_type": "llama",
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_interleaved": False,
    "rope_scaling": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 49152,
}
QWEN25 = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "model_type": "qwen2",
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
PUBLISHED = {
    "SmolLM2-135M": SMOLLM2
    | dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, head_dim=64,
           num_hidden_layers=30, num_key_value_heads=3, rope_theta=100000),
    "SmolLM2-1.7B": SMOLLM2
    | dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
           num_hidden_layers=24, num_key_value_heads=32, rope_theta=130000),
    "Qwen2.5-0.5B": QWEN25
    | dict(hidden_size=896, intermediate_size=4864, max_position_embeddings=32768,
           max_window_layers=24, num_attention_heads=14, num_hidden_layers=24,
           num_key_value_heads=2, sliding_window=32768),
    "Qwen2.5-1.5B": QWEN25
    | dict(hidden_size=1536, intermediate_size=8960, max_position_embeddings=131072,
           max_window_layers=28, num_attention_heads=12, num_hidden_layers=28,
           num_key_value_heads=2, sliding_window=131072),
    "Llama-3.2-1B": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 128000,
        "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
        "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
        "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "vocab_size": 128256,
    },
}  # fmt: skip
# the parameter counts of the model cards (their rounding), for the derived count to meet
MODEL_CARD = {
    "SmolLM2-135M": (135e6, 0.005),
    "SmolLM2-1.7B": (1.7e9, 0.01),
    "Qwen2.5-0.5B": (0.49e9, 0.01),
    "Qwen2.5-1.5B": (1.54e9, 0.005),
    "Llama-3.2-1B": (1.24e9, 0.005),
}
README_PAIRS = {
    "SmolLM2": ("SmolLM2-1.7B", "SmolLM2-135M"),
    "Qwen2.5": ("Qwen2.5-1.5B", "Qwen2.5-0.5B"),
}
GIB = 2**30


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_config_is_read_and_its_size_is_the_model_cards(name):
    cfg = LlamaConfig.from_hf_dict(PUBLISHED[name])
    count, tolerance = MODEL_CARD[name]
    print(f"{name}: {parameter_count(cfg):,} parameters")
    assert abs(parameter_count(cfg) / count - 1) < tolerance, parameter_count(cfg)


def test_qwen2_turns_gqa_and_biases_on_and_reads_its_window_as_off():
    cfg = LlamaConfig.from_hf_dict(PUBLISHED["Qwen2.5-1.5B"])
    assert (cfg.n_head, cfg.n_kv_head, cfg.attention_bias) == (12, 2, True)


def test_a_rope_on_adjacent_pairs_is_refused_by_name():
    with pytest.raises(ValueError, match="rope_interleaved=true"):
        LlamaConfig.from_hf_dict(PUBLISHED["SmolLM2-135M"] | {"rope_interleaved": True})


def test_the_readmes_memory_figures_are_computed_from_the_published_configs():
    """README: 'needs about X GiB' for each pair, at the demo's length; recomputed here, so
    the sentence cannot drift from the code that counts."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    chinese = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")  # the same figures
    for family, (target, draft) in README_PAIRS.items():
        need = memory_to_run(
            LlamaConfig.from_hf_dict(PUBLISHED[target]),
            LlamaConfig.from_hf_dict(PUBLISHED[draft]),
            tokens=2048,
        )
        quoted = re.search(rf"{re.escape(target)} \+ {re.escape(draft)}: about ([\d.]+) GiB", text)
        assert quoted, f"the README gives no memory figure for the {family} pair"
        assert float(quoted.group(1)) == round(need / GIB, 1), (family, need / GIB)
        assert f"{quoted.group(1)} GiB" in chinese
    for target, digits in (("SmolLM2-1.7B", 2), ("Qwen2.5-1.5B", 2)):
        cfg = LlamaConfig.from_hf_dict(PUBLISHED[target])
        cache = memory_to_run(cfg, cfg, 2048) - memory_to_run(cfg, cfg, 0)  # both: twice
        quoted = re.search(rf"{re.escape(target)}'s cache, [^)]*?is ([\d.]+) GiB", text)
        assert quoted, f"the README gives no cache figure for {target}"
        assert float(quoted.group(1)) == round(cache / 2 / GIB, digits), (target, cache / 2 / GIB)
        assert f"{quoted.group(1)} GiB" in chinese
