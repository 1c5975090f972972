"""Benchmark of the `.ir` text parser (`ingest.formats.mindspore.ir_text.parse_ir_text`) on a
generated big graph.

Generates a MindSpore 2.x kernel-graph IR with N nodes (default 100,000) shaped like the real
2.10 dumps under tests/data: a node line with operands, an instance name, primitive attributes,
cnode attributes and a unique id; a host type line, a device type line and a kernel object-type
line; the full-name line; and 3-6 `# In file` frames (framework wrapper frames, user frames and
framework layer frames, drawn from a model with a realistic number of distinct source lines).
About one node in ten is a Load or UpdateState with no device line and no frames, as in the
real graphs.

It then times `parse_ir_text` (parser caches cleared before each run, so nothing carries over
between runs) against a baseline that only splits the same text into lines, and prints
nodes/s and the ratio. Target: >= 50,000 nodes/s.

    python bench/bench_ir.py                 # 100,000 nodes, best of 3
    python bench/bench_ir.py --nodes 20000 --runs 5
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import emit  # noqa: E402
from ingest.formats.mindspore.ir_text import clear_caches, parse_ir_text  # noqa: E402

SITE = "/opt/venv/lib/python3.11/site-packages/mindspore"
USER = "/src/project/model.py"
SCOPE = "Default/network-WithLossCell/_backbone-Net"
WRAPPER_FRAMES = [
    f"{SITE}/nn/wrap/cell_wrapper.py:423~438, 4~19/    def construct(self, *inputs):/",
    f"{SITE}/nn/wrap/cell_wrapper.py:425, 19~37/            return self._no_sens_impl(*inputs)/",
    f"{SITE}/nn/wrap/cell_wrapper.py:121~123, 4~40/    def construct(self, data, label):/",
    f"{SITE}/nn/wrap/cell_wrapper.py:122, 14~28/        out = self._backbone(data)/",
]
LAYER_FRAMES = [
    f"{SITE}/nn/layer/basic.py:803~815, 4~16/    def construct(self, x):/",
    f"{SITE}/nn/layer/basic.py:807, 12~39/        x = self.matmul(x, self.weight)/",
    f"{SITE}/nn/layer/conv.py:360~372, 4~16/    def construct(self, x):/",
    f"{SITE}/nn/layer/conv.py:362, 17~44/        output = self.conv2d(x, self.weight)/",
]
OPS = [
    (
        "MatMul",
        "{instance name: matmul} primitive_attrs: {IsFeatureMapOutput: Bool(1), "
        'IsFeatureMapInputList: (0, 2, 3), right_format: "DefaultFormat", dst_type: F32}',
        4,
    ),
    (
        "Conv2D",
        "{instance name: conv2d} primitive_attrs: {kernel_size: (3, 3), mode: I64(1), "
        'out_channel: I64(64), pad_mode: "same", format: "NCHW", stride: (1, 1, 1, 1)}',
        2,
    ),
    (
        "BiasAdd",
        "{instance name: bias_add} primitive_attrs: {IsFeatureMapOutput: Bool(1), "
        "IsFeatureMapInputList: (0, 2)}",
        3,
    ),
    (
        "ReLU",
        "{instance name: relu} primitive_attrs: {IsFeatureMapOutput: Bool(1), IsFeatureMapInputList: (0)}",
        1,
    ),
    ("Add", "primitive_attrs: {IsFeatureMapOutput: Bool(1), IsFeatureMapInputList: (0, 1)}", 2),
]
SHAPES = [
    (32, 256, 13, 13),
    (32, 128, 26, 26),
    (32, 64, 52, 52),
    (32, 4096),
    (32, 1024),
    (4096, 9216),
    (1024, 4096),
    (256,),
    (64, 3, 3, 3),
    (32, 10),
]


def _shape(s: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, s)) + ")"


def _dev(s: tuple[int, ...]) -> str:
    return "<Float32xDefaultFormat[const vector]{" + ", ".join(map(str, s)) + "}>"


def generate_ir(n_nodes: int, seed: int = 0) -> str:
    """A 2.x kernel-graph .ir text with n_nodes CNodes (plus params and the Return)."""
    rng = random.Random(seed)
    n_params = 200
    out = [
        "# IR entry: @kernel_graph0",
        "# Total subgraphs: 1",
        "",
        "# Attrs:",
        "enable_zero_copy_in_graph: 1",
        "",
        f"# Total params: {n_params}",
        "# Params:",
    ]
    for p in range(1, n_params + 1):
        s = rng.choice(SHAPES)
        out.append(
            f"%para{p}_layer{p}.weight: <Ref[Tensor[Float32]], {_shape(s)}, ref_key=layer{p}.weight, "
            f"is_parameter, is_inplace>  :  has_default  :  {_dev(s)}  :  IsWeight: true"
        )
    out += [
        "",
        "Node counting information:",
        f"Total number of nodes: {n_nodes * 3}",
        f"Total number of cnodes: {n_nodes + 1}",
        "",
        "subgraph attr:",
        "enable_zero_copy_in_graph: 1",
        "subgraph instance: kernel_graph0 : 0x5601219f0000",
        "",
        "subgraph @kernel_graph0() {",
    ]
    n_layers = 400  # distinct user lines: one construct line per layer, 3 calls each
    for i in range(n_nodes):
        layer = rng.randrange(n_layers)
        if i % 10 == 9:  # Load / UpdateState: no device line, no frames
            p = rng.randrange(1, n_params + 1)
            out.append(
                f"  %{i}(CNode_{i}) = Load(%para{p}_layer{p}.weight, UMonad[U]) cnode_attrs: "
                f'{{checkpoint: Bool(1), is_dynamic_len: Bool(0)}} cnode_primal_attrs: {{unique_id: "{i}"}}'
            )
            out.append(
                "      : (<Ref[Tensor[Float32]], (256), ref_key=w, is_parameter>, <UMonad, NoShape>)"
                " -> (<Tensor[Float32], (256)>)"
            )
            out.append(f"      # Fullname with scope: ({SCOPE}/Load-op{i})")
            continue
        op, attrs, n_in = OPS[rng.randrange(len(OPS))]
        operands = []
        for _ in range(n_in):
            if i and rng.random() < 0.7:
                operands.append(f"%{rng.randrange(max(0, i - 50), i)}")
            elif rng.random() < 0.5:
                p = rng.randrange(1, n_params + 1)
                operands.append(f"%para{p}_layer{p}.weight")
            else:
                operands.append(rng.choice(["Bool(0)", "Bool(1)", "I64(0)"]))
        in_shapes = [rng.choice(SHAPES) for _ in operands]
        out_shape = rng.choice(SHAPES)
        out.append(
            f"  %{i}(equiv_{i}_x) = PrimFunc_{op}({', '.join(operands)}) {attrs} cnode_attrs: "
            f'{{checkpoint: Bool(1), is_dynamic_len: Bool(0)}} cnode_primal_attrs: {{unique_id: "{i}"}}'
        )
        out.append(
            "      : ("
            + ", ".join(f"<Tensor[Float32], {_shape(s)}>" for s in in_shapes)
            + f") -> (<Tensor[Float32], {_shape(out_shape)}>)"
        )
        out.append("      : (" + ", ".join(_dev(s) for s in in_shapes) + f") -> ({_dev(out_shape)})")
        out.append("      : (" + ", ".join("Tensor" for _ in in_shapes) + ") -> (Tensor)")
        out.append(f"      # Fullname with scope: ({SCOPE}/layer{layer}-Block/{op}-op{i})")
        depth = rng.randint(3, 6)
        frames = [
            WRAPPER_FRAMES[0],
            f"{USER}:{20 + layer * 4}~{23 + layer * 4}, 4~16/    def construct(self, x):/",
            f"{USER}:{21 + layer * 4 + rng.randrange(3)}, 12~30/        x = self.block{layer}(x)/",
            *LAYER_FRAMES[(layer % 2) * 2 : (layer % 2) * 2 + 2],
            WRAPPER_FRAMES[3],
        ][:depth]
        if depth >= 5:
            frames = [WRAPPER_FRAMES[0], WRAPPER_FRAMES[1], *frames[1:-1]]
        out.extend(f"      # In file {f}" for f in frames)
    out += [
        f"  Return(%{n_nodes - 1})",
        "      : (<Tensor[Float32], (32, 10)>)",
        "      # Fullname with scope: (Default/Return-op0)",
        "}",
        "# Order:",
        "#   1: @kernel_graph0:CNode_1{[0]: ValueNode<Primitive> Return, [1]: CNode_0}",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    t0 = time.perf_counter()
    text = generate_ir(args.nodes)
    gen_s = time.perf_counter() - t0
    n_lines = text.count("\n") + 1
    print(f"generated {args.nodes:,} nodes, {n_lines:,} lines, {len(text) / 1e6:.1f} MB in {gen_s:.1f} s")

    split_times, parse_times = [], []
    graph = None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        lines = text.split("\n")
        split_times.append(time.perf_counter() - t0)
        del lines
        graph = None  # free the previous run's graph before timing the next one
        gc.collect()
        clear_caches()
        t0 = time.perf_counter()
        graph = parse_ir_text(text)
        parse_times.append(time.perf_counter() - t0)
    assert graph is not None
    cnodes = sum(1 for n in graph.nodes if not n.is_parameter)
    if graph.errors or cnodes != args.nodes + 1:
        raise SystemExit(f"parse problem: {cnodes} cnodes, errors {graph.errors[:3]}")
    best_parse, best_split = min(parse_times), min(split_times)
    rate = args.nodes / best_parse
    split_lps, parse_lps = n_lines / best_split / 1e6, n_lines / best_parse / 1e6
    emit.summary(
        f"parsing a {args.nodes:,}-node graph IR", ">= 50,000 nodes/s", f"{rate:,.0f} nodes/s", rate >= 50_000
    )
    emit.report_follows()
    print(
        f"A generated kernel-graph IR of {args.nodes:,} nodes ({n_lines:,} lines, {len(text) / 1e6:.1f} MB), "
        f"best of {args.runs} runs (parser caches cleared before each)."
    )
    print()
    print("| | ms | M lines/s | nodes/s |")
    print("|---|---|---|---|")
    print(f"| `parse_ir_text` | {best_parse * 1e3:,.1f} | {parse_lps:.2f} | {rate:,.0f} |")
    print(f"| baseline: `text.split('\\n')` | {best_split * 1e3:,.1f} | {split_lps:.1f} | |")
    print(f"| ratio parse / split | {best_parse / best_split:.1f}x | | |")


if __name__ == "__main__":
    main()
