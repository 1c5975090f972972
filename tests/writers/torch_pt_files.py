"""Write small REAL `torch.save` files into tests/data/torch_pt/ (runs ONLY under the producer venv).

This script imports torch; the project itself never does. Run it by hand from the repo root:

    <producer venv>/bin/python tests/writers/torch_pt_files.py            # (re)write the files
    <producer venv>/bin/python tests/writers/torch_pt_files.py --fuzz     # cross-check with torch

Each case `<name>.pt` is written by `torch.save` exactly as msprobe writes its dump_tensor_data
files (the default zip format; `legacy_*` with `_use_new_zipfile_serialization=False`). Next to
each readable one is a twin `<name>.npy` of what `torch.load(path)` holds: `.numpy()` of the
detached, conj-resolved tensor for the dtypes numpy has; for bfloat16 and the float8 types, which
numpy lacks (and ml_dtypes is not in this venv), the raw bits as uint16/uint8 in C order; for
complex32 (`.numpy()` cannot convert it) the exact widening `.to(torch.complex64)`.
manifest.json gives, per case, the expected torch dtype, shape, strides, storage offset,
requires_grad, contiguity and twin kind, or for a file that must be refused the words its error
must contain.

`--fuzz` loads every byte flip and truncation of a few committed files with both torch.load and
ingest.formats.msprobe.torch_pt.load_pt and reports every flip where load_pt returns values that torch
does not (a dev check; the project's tests do the same without torch, against the file bytes).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "torch_pt"

BITS = {
    torch.bfloat16: torch.uint16,
    **{
        getattr(torch, n): torch.uint8
        for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
    },
}


def values(shape: tuple[int, ...] = (2, 3)) -> torch.Tensor:
    """Small distinct float32 values, all exactly representable in float8 e4m3/e5m2."""
    n = int(np.prod(shape))
    base = torch.tensor(
        [0.5, -1.0, 1.5, -2.0, 3.0, 0.25, -0.75, 4.0, 6.0, -8.0, 0.125, 2.5], dtype=torch.float32
    )
    return base.repeat(n // 12 + 1)[:n].reshape(shape)


def cases() -> dict[str, object]:
    """name -> object to torch.save (a tensor, or something that must be refused)."""
    out: dict[str, object] = {}
    for name in ("float32", "float64", "float16", "bfloat16", "complex64", "complex128"):
        dt = getattr(torch, name)
        t = values().to(dt)
        if dt.is_complex:
            t = t + 1j * values().flip(1).to(dt)
        out[name] = t
    out["complex32"] = (values() + 1j * values().flip(1)).to(torch.complex32)
    for name in ("int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"):
        dt = getattr(torch, name)
        info = torch.iinfo(dt)
        out[name] = torch.tensor([[info.min, -1 if info.min else 1, 0], [1, 7, info.max]], dtype=dt)
    out["uint8"] = torch.tensor([[0, 1, 127], [128, 200, 255]], dtype=torch.uint8)
    out["bool"] = torch.tensor([[True, False, True], [False, False, True]])
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
        out[name] = values().to(getattr(torch, name))
    out["float8_e8m0fnu"] = torch.tensor([[0.5, 1.0, 2.0], [4.0, 1024.0, 2.0**-10]]).to(torch.float8_e8m0fnu)
    out["scalar"] = torch.tensor(3.25)
    out["scalar_int64"] = torch.tensor(-42, dtype=torch.int64)
    out["empty"] = torch.empty(0, 3)
    out["empty_sliced"] = torch.arange(4.0)[4:]
    out["transpose"] = torch.arange(12.0).reshape(3, 4).t()
    out["slice_offset"] = torch.arange(20, dtype=torch.int32).reshape(4, 5)[1:3, 2:]
    out["row_offset"] = torch.arange(10.0)[3:7]
    out["expand"] = torch.tensor([1.0, 2.0, 3.0]).expand(2, 3)
    out["bfloat16_transpose"] = values((3, 4)).to(torch.bfloat16).t()
    out["complex32_transpose"] = (values((2, 3)) - 1j).to(torch.complex32).t()
    out["requires_grad"] = torch.ones(2, 3, requires_grad=True) * 1.0 + 0.5
    out["requires_grad"] = out["requires_grad"].detach().requires_grad_(True)
    out["parameter"] = torch.nn.Parameter(values((2, 2)))
    out["nan_inf"] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45, 3.4e38])
    out["conj"] = (values((2, 2)) + 1j * values((2, 2)).flip(0)).to(torch.complex64).conj()
    attr = values((2,)).clone()
    attr.msprobe_note = "python attribute on a tensor"  # pickled via _rebuild_from_type_v2
    out["attribute"] = attr
    out["legacy_float32"] = torch.arange(6.0).reshape(2, 3)
    out["legacy_slice"] = torch.arange(12, dtype=torch.int16).reshape(3, 4)[1:, 1:]
    # Must be refused:
    out["dict_of_tensors"] = {"a": torch.ones(2), "b": torch.zeros(3)}
    out["list_of_tensors"] = [torch.ones(2), torch.zeros(3)]
    out["quantized"] = torch.quantize_per_tensor(values(), 0.5, 0, torch.qint8)
    out["sparse"] = torch.eye(3).to_sparse()
    out["nested"] = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    return out


REFUSED = {
    "dict_of_tensors": "holds a dict, not one tensor",
    "list_of_tensors": "holds a list, not one tensor",
    "quantized": "quantized tensors are not supported",
    "sparse": "sparse tensors are not supported",
    "nested": "nested tensors are not supported",
}


def twin(t: torch.Tensor) -> tuple[np.ndarray, str]:
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype in BITS:
        return t.contiguous().view(BITS[t.dtype]).numpy(), "bits"
    if t.dtype == torch.complex32:
        return t.to(torch.complex64).numpy(), "values"
    return t.numpy(), "values"


def write() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    manifest: dict[str, dict[str, object]] = {}
    for name, obj in cases().items():
        path = OUT / f"{name}.pt"
        torch.save(obj, path, _use_new_zipfile_serialization=not name.startswith("legacy_"))
        if name in REFUSED:
            manifest[name] = {"file": path.name, "refused": REFUSED[name]}
            continue
        assert isinstance(obj, torch.Tensor)
        back = torch.load(path, weights_only=not name.startswith("legacy_"))
        arr, kind = twin(back)
        np.save(OUT / f"{name}.npy", arr)
        manifest[name] = {
            "file": path.name,
            "twin": f"{name}.npy",
            "twin_kind": kind,
            "torch_dtype": str(back.dtype),
            "shape": list(back.shape),
            "strides": list(back.stride()),
            "storage_offset": back.storage_offset(),
            "requires_grad": back.requires_grad,
            "contiguous": back.is_contiguous() and not back.is_conj() and not back.is_neg(),
            "legacy": name.startswith("legacy_"),
        }
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(manifest)} cases, {total} bytes, into {OUT} (torch {torch.__version__})")


def fuzz(names: tuple[str, ...] = ("float32", "transpose", "bfloat16", "legacy_float32", "parameter")) -> int:
    """Every flip of one bit per byte and every truncation: compare load_pt with torch.load."""
    sys.path.insert(0, str(REPO))
    from ingest.formats.msprobe import torch_pt

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            data = (OUT / f"{name}.pt").read_bytes()
            variants = [data[:n] for n in range(len(data))]
            variants += [data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :] for i in range(len(data))]
            ok = err = agree = 0
            for k, blob in enumerate(variants):
                path = Path(tmp) / f"{name}.pt"
                path.write_bytes(blob)
                try:
                    ours = torch_pt.load_pt(path)
                except (torch_pt.PtError, OSError):
                    err += 1
                    continue
                ok += 1
                try:
                    theirs = twin(torch.load(path, weights_only=not name.startswith("legacy_")))[0]
                except Exception:
                    theirs = None
                mine = ours.view(theirs.dtype) if theirs is not None and ours.dtype != theirs.dtype else ours
                if (
                    theirs is not None
                    and mine.shape == theirs.shape
                    and (mine.tobytes() == np.ascontiguousarray(theirs).tobytes())
                ):
                    agree += 1
                else:
                    bad += 1
                    what = "truncated" if k < len(data) else f"flip at byte {k - len(data)}"
                    print(
                        f"  {name}: {what}: load_pt gives {ours.dtype}{ours.shape}, torch "
                        f"{'refuses' if theirs is None else theirs.dtype}"
                    )
            print(f"{name}: {len(variants)} variants: {err} refused, {ok} read, {agree} equal to torch.load")
    return bad


if __name__ == "__main__":
    if "--fuzz" in sys.argv:
        sys.exit(1 if fuzz() else 0)
    write()
