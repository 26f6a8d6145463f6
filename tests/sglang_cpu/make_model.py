"""Write a tiny random-weight Qwen2 model in Hugging Face format, for real SGLang on a CPU.

    <conformance-env python> tests/sglang_cpu/make_model.py OUT_DIR

Made, not downloaded: a byte-level BPE tokenizer trained here on autotune's built-in prompt suites
(so every prompt tokenizes, offline), and a Qwen2 of hidden size 256, 2 layers and a 32k context with
seeded random bf16 weights. The text it writes is noise; its launch, memory pools, logs, endpoints
and metrics are SGLang's own. Needs torch, transformers and tokenizers (the conformance env has them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SUITES = Path(__file__).resolve().parents[2] / "autotune" / "suites"
EOS = "<|endoftext|>"
VOCAB = 1024
CONTEXT = 32768


def corpus() -> list[str]:
    texts = []
    for suite in sorted(SUITES.glob("*.jsonl")):
        for line in suite.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(str(json.loads(line)["prompt"]))
    return texts


def tokenizer() -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS, pad_token=EOS, model_max_length=CONTEXT)


def main(out: Path) -> None:
    tok = tokenizer()
    eos = tok.convert_tokens_to_ids(EOS)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        tie_word_embeddings=True,
        bos_token_id=eos,
        eos_token_id=eos,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py OUT_DIR")
    main(Path(sys.argv[1]))
