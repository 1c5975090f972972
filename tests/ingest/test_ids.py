"""The fast id helpers give exactly the ids of the reference functions (ids are stored forever)."""

from ingest.ids import TensorIdHasher, stat_row_id, stat_row_ids, tensor_row_id


def test_batched_ids_equal_the_reference_functions():
    rels = ["rank_0/Net/0/0/Add.Add-op1.0.0.5.output.0.DefaultFormat.npy", "rank_1/x.npy", "ü/é.npy"]
    hasher = TensorIdHasher("run-ü")
    assert [hasher(r) for r in rels] == [tensor_row_id("run-ü", r) for r in rels]
    lines = [1, 2, 10, 123456]
    assert stat_row_ids("r", "rank_0/Net/0/0/statistic.csv", lines).tolist() == [
        stat_row_id("r", "rank_0/Net/0/0/statistic.csv", n) for n in lines
    ]
    many = stat_row_ids("r", "x", range(1, 200_001))
    assert many.min() >= 0 and len(set(many.tolist())) == 200_000  # no collision within a file
    other = stat_row_ids("r", "y", range(1, 200_001))
    assert not set(many.tolist()) & set(other.tolist())
    # Ids do not depend on the order or batching of the lines.
    assert stat_row_ids("r", "x", [7, 3]).tolist() == [stat_row_id("r", "x", 7), stat_row_id("r", "x", 3)]
