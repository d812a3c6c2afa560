"""Peak memory of `posenc port` on a generated ~1 GB checkpoint: it streams tensor by tensor.

Claim (docs/port.md): peak RSS <= framework baseline + 2 x the largest tensor. Each port runs in a
fresh subprocess (started through /bin/sh so it does not inherit this process's peak) and reports
`resource.getrusage(RUSAGE_SELF).ru_maxrss`; the baseline is the same subprocess that imports
everything and opens the source without reading a tensor. Checkpoints are written under /tmp (or
--dir) and deleted afterwards.

Configurations:
  llama   Meta-layout LLaMA-style checkpoint (dim 2048, 16 heads, 4 kv heads, vocab 32000, 3 layers,
          float32) through `--preset meta-llama-to-hf` (q/k permutation, RoPE logit verification).
  kernels 16 float32 tensors of 64 MiB, all transposed (`--transpose '*'`), torch -> Keras/Flax layout.
  sharded a Hugging Face LlamaForCausalLM checkpoint of the same shapes (HF names, config.json), saved as
          5 shards of <= 250 MB with model.safetensors.index.json, ported twice: to GGUF through
          `--preset hf-llama-to-gguf` (q/k permutation, GGUF logits verification read back through
          gguf.GGUFReader) and to a sharded checkpoint directory (`--max-shard-size 200MB`).

Usage: python benchmarks/bench_port_memory.py [--dir /tmp] [--only llama|kernels|sharded]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

MIB = 1 << 20

_CHILD = r"""
import json, resource, sys, time
from posenc import cli
from posenc.formats import open_reader
argv = json.loads(sys.argv[1])
start = time.perf_counter()
if argv[0] == "baseline":
    open_reader(argv[1])
    status = 0
else:
    status = cli.main(argv)
print("RESULT", json.dumps({{"status": status, "seconds": time.perf_counter() - start,
                            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def _generate(path, shapes, seed=0):
    """Write a float32 safetensors checkpoint one tensor at a time, in a subprocess.

    Linux keeps a process's ru_maxrss across fork + exec, so the measuring children must be started
    by a parent that never held much memory: the generation runs in its own child.
    """
    code = ("import sys, json, numpy as np\n"
            "from posenc.formats import write_checkpoint\n"
            "shapes = json.loads(sys.argv[2])\n"
            "def thunk(shape, i):\n"
            f"    return lambda: np.random.default_rng({seed} + i).standard_normal(shape, dtype=np.float32) * 0.02\n"
            "write_checkpoint(sys.argv[1], 'safetensors', [(n, tuple(s), 'float32', thunk(tuple(s), i))\n"
            "                                              for i, (n, s) in enumerate(shapes.items())])\n")
    subprocess.run([sys.executable, "-c", code, path, json.dumps(shapes)], check=True)


def _generate_sharded(directory, shapes, config, max_shard_size=250 * 10**6, seed=0):
    """An HF checkpoint directory: shards + index (posenc.formats.shards.write_shards) and config.json."""
    code = ("import sys, json, numpy as np\n"
            "from posenc.formats.shards import write_shards\n"
            "shapes = json.loads(sys.argv[2])\n"
            "def thunk(shape, i):\n"
            f"    return lambda: np.random.default_rng({seed} + i).standard_normal(shape, dtype=np.float32) * 0.02\n"
            "write_shards(sys.argv[1], [(n, tuple(s), 'float32', thunk(tuple(s), i))\n"
            f"                           for i, (n, s) in enumerate(shapes.items())], {{}}, {max_shard_size})\n")
    subprocess.run([sys.executable, "-c", code, directory, json.dumps(shapes)], check=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)


def hf_llama_shapes(dim=2048, heads=16, kv_heads=4, vocab=32000, layers=3, ffn=5632):
    hd = dim // heads
    shapes = {"model.embed_tokens.weight": (vocab, dim)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (heads * hd, dim),
                       p + "self_attn.k_proj.weight": (kv_heads * hd, dim),
                       p + "self_attn.v_proj.weight": (kv_heads * hd, dim),
                       p + "self_attn.o_proj.weight": (dim, heads * hd),
                       p + "mlp.gate_proj.weight": (ffn, dim), p + "mlp.up_proj.weight": (ffn, dim),
                       p + "mlp.down_proj.weight": (dim, ffn), p + "input_layernorm.weight": (dim,),
                       p + "post_attention_layernorm.weight": (dim,)})
    shapes.update({"model.norm.weight": (dim,), "lm_head.weight": (vocab, dim)})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
              "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": 8192,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}}
    return shapes, config


def run_sharded(directory):
    """The sharded HF checkpoint ported to GGUF and to a sharded directory, each in a fresh child."""
    work = tempfile.mkdtemp(prefix="posenc-bench-sharded-", dir=directory)
    try:
        shapes, config = hf_llama_shapes()
        source = os.path.join(work, "hf")
        os.mkdir(source)
        _generate_sharded(source, shapes, config)
        total = sum(int(np.prod(s)) * 4 for s in shapes.values())
        largest = max(int(np.prod(s)) * 4 for s in shapes.values())
        baseline = _child(["baseline", os.path.join(source, "model.safetensors.index.json")])
        rows = []
        for name, target, args in (("sharded HF -> GGUF (hf-llama-to-gguf)", os.path.join(work, "m.gguf"),
                                    ["--preset", "hf-llama-to-gguf"]),
                                   ("sharded HF -> sharded dir (--max-shard-size 200MB)",
                                    os.path.join(work, "out") + "/", ["--max-shard-size", "200MB"])):
            result = _child(["port", source, target, *args])
            bound = baseline["maxrss_mib"] + 2 * largest / MIB
            rows.append(dict(config=name, size_mib=total / MIB, largest_mib=largest / MIB,
                             baseline_mib=baseline["maxrss_mib"], peak_mib=result["maxrss_mib"], bound_mib=bound,
                             status=result["status"], seconds=result["seconds"],
                             ok=result["status"] == 0 and result["maxrss_mib"] <= bound))
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def llama_shapes(dim=2048, heads=16, kv_heads=4, vocab=32000, layers=3, ffn=5632):
    hd = dim // heads
    shapes = {"tok_embeddings.weight": (vocab, dim), "norm.weight": (dim,), "output.weight": (vocab, dim)}
    for i in range(layers):
        p = f"layers.{i}."
        shapes.update({p + "attention.wq.weight": (heads * hd, dim), p + "attention.wk.weight": (kv_heads * hd, dim),
                       p + "attention.wv.weight": (kv_heads * hd, dim), p + "attention.wo.weight": (dim, heads * hd),
                       p + "feed_forward.w1.weight": (ffn, dim), p + "feed_forward.w3.weight": (ffn, dim),
                       p + "feed_forward.w2.weight": (dim, ffn), p + "attention_norm.weight": (dim,),
                       p + "ffn_norm.weight": (dim,)})
    params = dict(dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads, rope_theta=500000.0)
    return shapes, params


def _child(argv):
    # Linux carries ru_maxrss over fork + exec (the forked copy of the parent counts), so a child started
    # from a large process (pytest with three frameworks loaded) would report the parent's size. A shell
    # in between forks the measured process from a small one; `; exit $?` stops it from exec'ing directly.
    command = [sys.executable, "-c", _CHILD.format(), json.dumps(argv)]
    out = subprocess.run(["/bin/sh", "-c", '"$@"; exit $?', "sh", *command], capture_output=True, text=True,
                         check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise SystemExit(f"child failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1][7:])


def run(name, shapes, port_args, directory, params=None):
    work = tempfile.mkdtemp(prefix=f"posenc-bench-{name}-", dir=directory)
    try:
        source = os.path.join(work, "source.safetensors")
        _generate(source, shapes)
        if params:
            with open(os.path.join(work, "params.json"), "w") as f:
                json.dump(params, f)
        total = sum(int(np.prod(s)) * 4 for s in shapes.values())
        largest = max(int(np.prod(s)) * 4 for s in shapes.values())
        baseline = _child(["baseline", source])
        target = os.path.join(work, "target.safetensors")
        result = _child(["port", source, target, *port_args])
        bound = baseline["maxrss_mib"] + 2 * largest / MIB
        return dict(config=name, size_mib=total / MIB, largest_mib=largest / MIB, baseline_mib=baseline["maxrss_mib"],
                    peak_mib=result["maxrss_mib"], bound_mib=bound, status=result["status"],
                    seconds=result["seconds"], ok=result["status"] == 0 and result["maxrss_mib"] <= bound)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp", help="where the generated checkpoints go (deleted afterwards)")
    parser.add_argument("--only", choices=("llama", "kernels", "sharded"))
    args = parser.parse_args(argv)
    rows = []
    started = time.perf_counter()
    if args.only in (None, "llama"):
        shapes, params = llama_shapes()
        rows.append(run("llama (meta-llama-to-hf)", shapes, ["--preset", "meta-llama-to-hf"], args.dir, params))
    if args.only in (None, "kernels"):
        shapes = {f"layers.{i}.dense.weight": (4096, 4096) for i in range(16)}
        rows.append(run("kernels (--transpose '*')", shapes, ["--transpose", "*"], args.dir))
    if args.only in (None, "sharded"):
        rows.extend(run_sharded(args.dir))
    print("| configuration | checkpoint MiB | largest tensor MiB | baseline RSS MiB | peak RSS MiB | "
          "bound MiB (baseline + 2 x largest) | port s | result |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['size_mib']:.0f} | {r['largest_mib']:.0f} | {r['baseline_mib']:.0f} | "
              f"{r['peak_mib']:.0f} | {r['bound_mib']:.0f} | {r['seconds']:.1f} | "
              f"{'ok' if r['ok'] else 'OVER' if r['status'] == 0 else 'exit ' + str(r['status'])} |")
    print(f"({time.perf_counter() - started:.0f} s in all)")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
