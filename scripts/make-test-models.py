#!/usr/bin/env python3
"""Write a tiny llama-architecture target model and a smaller draft model as GGUF, for llama-server.

The models are made, not downloaded: random weights (deterministic for a seed), with the tokenizer
of the vocab-only GGUF that ships inside the llama-cpp-python sdist
(``vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf``), so llama-server accepts the draft for the
target (same vocabulary) and real prompts tokenize as they would on a real llama model.

How speculation is made to pay: the draft *is* the target's first ``--draft-layers`` layer(s), with
the same token embedding, final norm and output matrix (the same bytes). Each further layer of the
target adds a small random update (``--divergence`` scales it) to the residual stream, so the
target's greedy choice usually, but not always, equals the draft's: acceptance is high and real,
and falls with each further drafted position. The target's layers are f32 (``--type``), so a
single-token pass of the 24-layer target is bound by memory bandwidth and verifying a few drafted
tokens costs little more; the shared embedding and output are q8_0 (``--shared-type``), so the
1-layer draft is cheap. On 2 CPU cores this makes drafts of several tokens (``--spec-draft-n-max``
around 6 to 14) clearly faster than no draft, while 1 or 2 drafted tokens do not pay for
themselves. ``--logit-scale`` spreads the logits so that the draft's confidence varies and
``--spec-draft-p-min`` is a real trade-off.

    scripts/make-test-models.py OUT_DIR [--layers 24] [--hidden 256] [--seed 0]

writes OUT_DIR/target.gguf and OUT_DIR/draft.gguf (and OUT_DIR/draft-<N>L.gguf for each
``--extra-drafts`` N, a choice of drafts) and prints their paths. Needs ``numpy`` and ``gguf``.
The vocab comes from ``--vocab`` (a vocab GGUF, or the sdist .tar.gz holding it); by default from
the sdist that scripts/build-llama-server.sh keeps in its cache (downloaded with pip if missing).
"""

from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import gguf
import numpy as np

VOCAB_MEMBER = "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf"
SDIST_VERSION = "0.3.36"  # the one scripts/build-llama-server.sh pins
# 32 keeps CPU test models small; real models use 128, and on a GPU the head size decides whether
# flash attention pays (on an H200, head size 32 ran every configuration about 2x slower with
# --flash-attn on than off; 128 ran as fast or faster), so a GPU landscape wants --head-dim 128.
HEAD_DIM = 32
TYPES = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
}
FILE_TYPES = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
}


def default_sdist() -> Path:
    cache = Path(os.environ.get("AUTOTUNE_CACHE_DIR", Path.home() / ".cache" / "autotune"))
    path = cache / "llama-server" / "sdist" / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if not path.exists():
        print(f"downloading llama-cpp-python=={SDIST_VERSION} (sdist) from PyPI", file=sys.stderr)
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"llama-cpp-python=={SDIST_VERSION}", "-d", str(path.parent)],
            check=True,
            stdout=sys.stderr,
        )  # fmt: skip
    return path


def read_vocab(source: Path) -> gguf.GGUFReader:
    """The vocab-only GGUF, from the file itself or from inside the sdist."""
    if source.suffix == ".gguf":
        return gguf.GGUFReader(source)
    with tarfile.open(source) as archive:
        member = next((m for m in archive.getmembers() if m.name.endswith(VOCAB_MEMBER)), None)
        if member is None:
            raise SystemExit(f"{source}: no {VOCAB_MEMBER} inside")
        extracted = archive.extractfile(member)
        assert extracted is not None
        handle = tempfile.NamedTemporaryFile(suffix=".gguf", delete=False)
        handle.write(extracted.read())
        handle.close()
    atexit.register(os.unlink, handle.name)
    return gguf.GGUFReader(handle.name)


def copy_tokenizer(vocab: gguf.GGUFReader, writer: gguf.GGUFWriter) -> int:
    """Copy every ``tokenizer.*`` key; return the vocabulary size."""
    size = 0
    for key, field in vocab.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        types = field.types
        if types[0] == gguf.GGUFValueType.ARRAY:
            size = max(size, len(value))
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, types[0])
    return size


class Weights:
    """Random tensors drawn in a fixed order from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def matrix(self, rows: int, cols: int, scale: float) -> np.ndarray:
        return (self.rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)


def make_tensors(
    *,
    layers: int,
    draft_layers: int,
    hidden: int,
    ffn: int,
    vocab: int,
    divergence: float,
    logit_scale: float,
    seed: int,
) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """The shared tensors and each layer's tensors (the draft uses the first ``draft_layers``)."""
    w = Weights(seed)
    shared = {
        "token_embd.weight": w.matrix(vocab, hidden, np.sqrt(hidden)),
        "output_norm.weight": np.ones(hidden, dtype=np.float32),
        "output.weight": w.matrix(vocab, hidden, logit_scale),
    }
    blocks = []
    for index in range(layers):
        # The residual update of a layer: moderate in the draft's layers, small in the target's
        # further layers, so they nudge (not overturn) the draft's prediction.
        out_scale = 0.5 if index < draft_layers else divergence
        blocks.append(
            {
                "attn_norm.weight": np.ones(hidden, dtype=np.float32),
                "attn_q.weight": w.matrix(hidden, hidden, 1.0),
                "attn_k.weight": w.matrix(hidden, hidden, 1.0),
                "attn_v.weight": w.matrix(hidden, hidden, 1.0),
                "attn_output.weight": w.matrix(hidden, hidden, out_scale),
                "ffn_norm.weight": np.ones(hidden, dtype=np.float32),
                "ffn_gate.weight": w.matrix(ffn, hidden, 1.0),
                "ffn_up.weight": w.matrix(ffn, hidden, 1.0),
                "ffn_down.weight": w.matrix(hidden, ffn, out_scale),
            }
        )
    return shared, blocks


def write_model(
    path: Path,
    *,
    name: str,
    vocab: gguf.GGUFReader,
    shared: dict[str, np.ndarray],
    blocks: list[dict[str, np.ndarray]],
    hidden: int,
    ffn: int,
    context: int,
    dtype: str,
    shared_dtype: str,
    head_dim: int = HEAD_DIM,
) -> None:
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(len(blocks))
    writer.add_feed_forward_length(ffn)
    writer.add_rope_dimension_count(head_dim)
    writer.add_head_count(hidden // head_dim)
    writer.add_head_count_kv(hidden // head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(FILE_TYPES[dtype])
    n_vocab = copy_tokenizer(vocab, writer)
    writer.add_vocab_size(n_vocab)
    if dtype.startswith("q"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tensors = dict(shared)
    for index, block in enumerate(blocks):
        tensors.update({f"blk.{index}.{key}": value for key, value in block.items()})
    for tensor_name, value in tensors.items():
        kind = shared_dtype if tensor_name in shared else dtype
        if value.ndim == 1 or kind == "f32":  # norms stay f32, as llama.cpp's converters keep them
            writer.add_tensor(tensor_name, value)
        elif kind == "f16":
            writer.add_tensor(tensor_name, value.astype(np.float16))
        else:
            packed = gguf.quants.quantize(value, TYPES[kind])
            writer.add_tensor(tensor_name, packed, raw_shape=packed.shape, raw_dtype=TYPES[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder to write target.gguf and draft.gguf into")
    parser.add_argument("--layers", type=int, default=24, help="target layers (default 24)")
    parser.add_argument("--draft-layers", type=int, default=1, help="draft layers, shared with the target's first")
    parser.add_argument(
        "--extra-drafts", type=lambda text: [int(n) for n in text.split(",")], default=[], metavar="N,M",
        help="also write draft-<N>L.gguf of the target's first N layers, for each N (a choice of drafts)",
    )
    parser.add_argument("--hidden", type=int, default=256, help="hidden size, a multiple of 32 (default 256)")
    parser.add_argument("--ffn", type=int, default=None, help="feed-forward size (default 4 x hidden)")
    parser.add_argument("--context", type=int, default=4096, help="trained context length written to the file")
    parser.add_argument(
        "--divergence", type=float, default=0.01, help="scale of the target-only layers' updates (default 0.01)"
    )
    parser.add_argument(
        "--logit-scale", type=float, default=4.0, help="spread of the logits: higher, more confident (default 4)"
    )
    parser.add_argument("--type", choices=sorted(TYPES), default="f32", help="layer weight type (default f32)")
    parser.add_argument(
        "--shared-type", choices=sorted(TYPES), default="q8_0", help="embedding and output type (default q8_0)"
    )
    parser.add_argument("--head-dim", type=int, default=HEAD_DIM, help=f"attention head size (default {HEAD_DIM})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=Path, default=None, help="vocab GGUF or llama-cpp-python sdist")
    args = parser.parse_args(argv)
    if args.head_dim <= 0 or args.hidden % args.head_dim or args.hidden <= 0:
        parser.error(f"--hidden must be a positive multiple of --head-dim ({args.head_dim})")
    if not all(0 < n < args.layers for n in [args.draft_layers, *args.extra_drafts]):
        parser.error("--draft-layers and --extra-drafts must be at least 1 and fewer than --layers")
    ffn = args.ffn or 4 * args.hidden
    if args.type.startswith("q") and ffn % 32:
        parser.error(f"--ffn must be a multiple of 32 for {args.type}")

    vocab = read_vocab(args.vocab or default_sdist())
    n_vocab = len(vocab.fields["tokenizer.ggml.tokens"].data)
    shared, blocks = make_tensors(
        layers=args.layers,
        draft_layers=args.draft_layers,
        hidden=args.hidden,
        ffn=ffn,
        vocab=n_vocab,
        divergence=args.divergence,
        logit_scale=args.logit_scale,
        seed=args.seed,
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    common = {
        "vocab": vocab,
        "shared": shared,
        "hidden": args.hidden,
        "ffn": ffn,
        "context": args.context,
        "shared_dtype": args.shared_type,
        "head_dim": args.head_dim,
    }
    target, draft = args.out_dir / "target.gguf", args.out_dir / "draft.gguf"
    write_model(target, name=f"autotune-test-target-{args.layers}L", blocks=blocks, dtype=args.type, **common)
    write_model(draft, name=f"autotune-test-draft-{args.draft_layers}L", blocks=blocks[: args.draft_layers],
                dtype=args.type, **common)  # fmt: skip
    extra = [args.out_dir / f"draft-{n}L.gguf" for n in args.extra_drafts]
    for n, path in zip(args.extra_drafts, extra, strict=True):
        write_model(path, name=f"autotune-test-draft-{n}L", blocks=blocks[:n], dtype=args.type, **common)
    for path in [target, draft, *extra]:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
