"""RowIdSet (ingest/row_id_set.py) answers like a Python set, across spills and merges."""

from __future__ import annotations

import random

import numpy as np

from ingest import row_id_set
from ingest.ids import TensorIdHasher
from ingest.row_id_set import RowIdSet


def test_same_answers_as_a_set_across_spills_and_merges(monkeypatch):
    monkeypatch.setattr(row_id_set, "_RECENT_MAX", 64)  # many spills and merges from few ids
    hasher = TensorIdHasher("run")
    ids = [hasher(f"rank_0/Net/0/{i // 100}/t{i}.npy") for i in range(5000)]
    rng = random.Random(7)
    reference: set[int] = set()
    ours = RowIdSet()
    for k in range(0, len(ids), 37):
        chunk = ids[k : k + 37]
        if k % 3 == 0:
            for r in chunk:
                ours.add(r)
        elif k % 3 == 1:
            ours.update(chunk)
        else:
            ours.update(np.asarray(chunk + chunk[:5], dtype=np.int64))  # repeats count once
        reference.update(chunk)
        probe = rng.sample(ids, 20) + [rng.getrandbits(63) for _ in range(20)]
        assert [p in ours for p in probe] == [p in reference for p in probe]
        assert ours.contains_many(probe).tolist() == [p in reference for p in probe]
    assert len(ours) == len(reference) == 5000
    assert len(ours._runs) <= 1 + int(np.log2(5000 / 64)) + 1
    assert ours.nbytes() == 8 * 5000


def test_large_array_update_and_memory():
    ids = np.random.default_rng(3).integers(0, 2**63 - 1, size=300_000, dtype=np.int64)
    s = RowIdSet(ids)
    assert len(s) == len(np.unique(ids))
    assert s.nbytes() <= 8 * len(ids)
    assert int(ids[123]) in s
    others = np.random.default_rng(4).integers(0, 2**63 - 1, size=1000, dtype=np.int64)
    assert s.contains_many(others).tolist() == np.isin(others, ids).tolist()
    assert [int(o) in s for o in others[:50]] == np.isin(others[:50], ids).tolist()
    assert s.contains_many(ids[:1000]).all()
    assert not RowIdSet().contains_many([1, 2, 3]).any()
