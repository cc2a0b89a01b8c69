"""A tiny random Llama and a SmolLM2-shaped resource folder, for the SmolLM2 papers' tests (no download)."""
from __future__ import annotations

import json

import numpy as np
import torch
import transformers

from paperflow.spec import Resources


def tiny_llama(seed: int = 0, max_positions: int = 256, frozen: bool = False) -> transformers.LlamaForCausalLM:
    """2 layers, d=32, 4 query heads sharing 2 KV heads (grouped-query, as SmolLM2), vocab 32, eval mode."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_positions, tie_word_embeddings=True,
    )
    lm = transformers.LlamaForCausalLM(cfg).eval()
    for p in lm.parameters():
        p.requires_grad_(not frozen)
    return lm


def tiny_resources(tmp_path, max_positions: int = 256) -> Resources:
    """resources {smollm2: tiny Llama + word-level tokenizer over w0..w30, austen: six 300-word 'novels'}."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    model_dir = tmp_path / "tiny-llama"
    tiny_llama(max_positions=max_positions).save_pretrained(str(model_dir), safe_serialization=True)
    words = ["[UNK]"] + [f"w{i}" for i in range(31)]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(str(model_dir))
    rng = np.random.default_rng(0)
    titles = ["Emma", "Mansfield Park", "Northanger Abbey", "Persuasion", "Pride & Prejudice", "Sense & Sensibility"]
    books = {t: " ".join(f"w{i}" for i in rng.integers(0, 31, size=300)) for t in titles}
    austen = tmp_path / "austen.json"
    austen.write_text(json.dumps(books))
    return Resources(root=str(tmp_path), paths={"smollm2": str(model_dir), "austen": str(austen)})
