"""The fast id helpers give exactly the ids of the reference functions (ids are stored forever)."""

from ingest.ids import TensorIdHasher, stat_row_id, stat_row_ids, tensor_row_id


def test_batched_ids_equal_the_reference_functions():
    rels = ["rank_0/Net/0/0/Add.Add-op1.0.0.5.output.0.DefaultFormat.npy", "rank_1/x.npy", "ü/é.npy"]
    hasher = TensorIdHasher("run-ü")
    assert [hasher(r) for r in rels] == [tensor_row_id("run-ü", r) for r in rels]
    lines = [1, 2, 10, 123456]
    assert stat_row_ids("r", "rank_0/Net/0/0/statistic.csv", lines) == [
        stat_row_id("r", "rank_0/Net/0/0/statistic.csv", n) for n in lines
    ]
    assert all(0 < i < 2**63 for i in stat_row_ids("r", "x", lines))
    assert len(set(stat_row_ids("r", "x", lines) + stat_row_ids("r", "y", lines))) == 8
