"""Make a LoRA adapter in the PEFT layout for the tiny model, from seeded random weights.

    <engine venv>/bin/python tests/engines/make_lora.py MODEL_DIR OUT_DIR SEED RANK

Runs inside the engine's virtualenv (numpy and safetensors are vLLM's own dependencies).
The adapter targets q_proj and v_proj of every layer (the shapes read from the model's
config.json: A is rank x hidden, B is out x rank), with lora_alpha twice the rank and
both matrices random (a trained-from-zero B would leave the base unchanged): a few KB
whose effect on a completion is plainly visible, so a test can tell that the weights
were applied.
"""

import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def main() -> None:
    model, out, seed, rank = (
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
    )
    config = json.loads((model / "config.json").read_text())
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    outputs = {"q_proj": heads * head_dim, "v_proj": kv_heads * head_dim}
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module, width in outputs.items():
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = rng.normal(0, 0.5, (rank, hidden)).astype(
                np.float32
            )
            tensors[f"{prefix}.lora_B.weight"] = rng.normal(0, 0.5, (width, rank)).astype(
                np.float32
            )
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(
        json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": rank,
                "lora_alpha": 2 * rank,
                "lora_dropout": 0.0,
                "bias": "none",
                "target_modules": sorted(outputs),
                "base_model_name_or_path": str(model),
            }
        )
    )


if __name__ == "__main__":
    main()
