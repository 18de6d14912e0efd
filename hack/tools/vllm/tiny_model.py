"""Make the tiny model the engine tests serve: a Llama-shaped causal LM of a few MB with
random weights, and a byte-level BPE tokenizer with a chat template, trained here.

    <engine venv>/bin/python hack/tools/vllm/tiny_model.py OUT_DIR

Run by hack/tools/vllm.sh with the engine virtualenv's python (torch, transformers and
tokenizers come from its lock). No model hub is reachable from this machine or CI, and
the engine only needs something shaped like a real checkpoint, not one that says
anything sensible.

The same lock makes the same bytes: the weights are drawn from one seeded generator in
parameter-name order (not through transformers' initialisers, whose order may change),
the tokenizer is trained single-threaded on a fixed list of files from packages the
lock pins (the standard library's sources differ between Python patch releases, these
do not), and SHA256SUMS lists every file so two runs can be compared.
"""

import hashlib
import importlib
import os
import sys
from pathlib import Path

# Before tokenizers and torch start their thread pools: one thread keeps training and
# sampling order fixed.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["HF_HUB_OFFLINE"] = "1"

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 20261206
VOCAB_SIZE = 2048
MAX_POSITIONS = 2048

# Training text: (package, path inside it). English docstrings and Python code, from
# packages whose versions hack/tools/vllm/requirements.txt pins.
CORPUS = [
    ("transformers", "models/llama/modeling_llama.py"),
    ("transformers", "models/llama/configuration_llama.py"),
    ("transformers", "tokenization_utils_base.py"),
    ("transformers", "configuration_utils.py"),
    ("jinja2", "environment.py"),
    ("jinja2", "filters.py"),
    ("requests", "sessions.py"),
    ("requests", "models.py"),
    ("click", "core.py"),
]

BOS, EOS, PAD = "<|begin|>", "<|end|>", "<|pad|>"
ROLES = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]

# What turns a conversation into the prompt: each message after its role marker, ended
# by EOS (so a model that learned the format would stop there), then the assistant's
# marker when a reply is asked for.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def corpus_files() -> list[Path]:
    files = []
    for package, path in CORPUS:
        root = Path(importlib.import_module(package).__file__).parent
        file = root / path
        if not file.is_file():
            sys.exit(f"tiny_model: {package} has no {path} (is the engine venv from the lock?)")
        files.append(file)
    return files


def train_tokenizer(files: list[Path]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[PAD, BOS, EOS, *ROLES],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # One text per file, in list order.
    texts = [f.read_text(encoding="utf-8") for f in files]
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def build_model(tokenizer: Tokenizer) -> LlamaForCausalLM:
    vocab = tokenizer.get_vocab()
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=vocab[BOS],
        eos_token_id=vocab[EOS],
        pad_token_id=vocab[PAD],
    )
    model = LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    # bfloat16, the dtype vLLM's CPU backend runs in: it would cast float32 weights on
    # load and warn once per tensor.
    return model.to(torch.bfloat16).eval()


def write_sums(out: Path) -> str:
    lines = []
    for file in sorted(p for p in out.rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        lines.append(f"{digest}  {file.relative_to(out).as_posix()}\n")
    text = "".join(lines)
    (out / "SHA256SUMS").write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(SEED)

    tokenizer = train_tokenizer(corpus_files())
    model = build_model(tokenizer)
    model.save_pretrained(out, safe_serialization=True)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLES,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
    ).save_pretrained(out)
    digest = write_sums(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {params} parameters, vocab {tokenizer.get_vocab_size()}, sha256 {digest}")


if __name__ == "__main__":
    main()
