"""A Llama-shaped config small enough to characterize in well under a second and to run on any
CPU, for the LLM tests (tests/test_llm.py, tests/test_llm_generate.py)."""

from __future__ import annotations

import json
from pathlib import Path

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 1024,
        "tie_word_embeddings": False}
TINY_MOE = {**TINY, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}




def write_config(directory: Path, fields: dict = TINY) -> str:
    """`fields` written as `directory`/config.json; its path, as `--model` takes it."""
    path = directory / "config.json"
    path.write_text(json.dumps(fields))
    return str(path)
