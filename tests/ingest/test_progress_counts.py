"""An ingest's progress reports add up (issue 36): every file the walk sees advances `on_progress`
(the bar once stopped at 20,970 of 27,006 files: only tensor folders' files advanced it), the walk's
count is reported as the total when the walk ends, the phases after it are named, and the quick count
made before the walk (`ingest.progress.count_files`) is the walk's count for every producer's
layout, so that the bar's ETA holds from the start."""

from __future__ import annotations

import pytest

from ingest.pipeline import ingest_dump
from ingest.progress import count_files
from tests.conftest import DATA, SAMPLES


class Recorder:
    """An `on_progress` with the optional `total` and `phase` methods (ingest/progress.py)."""

    def __init__(self) -> None:
        self.done = 0
        self.totals: list[int] = []
        self.phases: list[str] = []

    def __call__(self, n: int) -> None:
        assert n > 0
        self.done += n

    def total(self, n: int) -> None:
        self.totals.append(n)

    def phase(self, name: str) -> None:
        self.phases.append(name)


DUMPS = {
    "mindspore-npy": SAMPLES / "multigraph" / "dump",
    "mindspore-npy control flow": DATA / "ms210" / "control_flow" / "dump",
    "ascend-raw": DATA / "ascend_raw" / "nan_log_rank",
    "ascend-raw-v1.2": DATA / "ascend_raw" / "nan_log_v12",
    "mindspore-bin": DATA / "mindspore_bin" / "kernels_filter_device",
    "ge": DATA / "ge" / "ge_tensor",
    "ge torchair": DATA / "ge" / "torchair",
    "atc-om": DATA / "ge" / "om",
    "msprobe statistics": DATA / "msprobe" / "pt_l1_statistics_2ranks",
    "msprobe tensors": DATA / "msprobe" / "pt_mix_tensor",
}
# msprobe's reader counts a rank's tensor-data folder as a file seen: the walk's count is one more
# per folder than the quick count, and the total follows the walk when it ends
WALK_COUNTS_FOLDERS = {"msprobe tensors"}


@pytest.mark.parametrize("name", list(DUMPS))
def test_progress_adds_up_to_the_walk_and_the_count_foresees_it(tmp_path, name):
    dump = DUMPS[name]
    progress = Recorder()
    summary = ingest_dump(tmp_path / "cat", dump, workers=2, on_progress=progress)
    assert summary.files_seen > 0
    assert progress.done == summary.files_seen  # every file seen advanced the bar
    assert progress.totals == [summary.files_seen]  # the walk's count, once, when it ends
    assert progress.phases[0] == "walking" and "committing" in progress.phases
    assert progress.phases[-1] in ("committing", "merging flat files")
    if name in WALK_COUNTS_FOLDERS:
        assert count_files(dump) < summary.files_seen
    else:
        assert count_files(dump) == summary.files_seen


def test_a_plain_callable_still_works_and_hears_only_counts(tmp_path):
    counts: list[int] = []
    summary = ingest_dump(tmp_path / "cat", DUMPS["mindspore-npy"], workers=1, on_progress=counts.append)
    assert sum(counts) == summary.files_seen


def test_count_files_skips_what_it_cannot_list_and_follows_no_symlink(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.npy").write_bytes(b"")
    (tmp_path / "a" / "y").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)  # one entry, not a folder
    assert count_files(tmp_path) == 3
    assert count_files(tmp_path / "missing") == 0


def test_stats_progress_has_its_total_first_and_moves_in_small_steps(tmp_path, monkeypatch):
    """`Catalog.compute_stats` reports the tensors without statistics as its total before any is
    computed, then advances a step at a time (1,024 tensors; 16 here, the sample has 180)."""
    from catalog import Catalog
    from ingest.statistics import rows

    monkeypatch.setattr(rows, "_PROGRESS_STEP", 16)
    with Catalog.open(tmp_path / "cat", create=True) as cat:
        cat.ingest(DATA / "ms210" / "nan_log" / "dump", compute_stats=False)
        events: list[tuple[str, object]] = []

        class Events(Recorder):
            def __call__(self, n: int) -> None:
                events.append(("n", n))

            def total(self, n: int) -> None:
                events.append(("total", n))

            def phase(self, name: str) -> None:
                events.append(("phase", name))

        summary = cat.compute_stats(workers=2, on_progress=Events())
    steps = [n for kind, n in events if kind == "n"]
    assert summary.computed == 180 and sum(steps) == 180
    assert steps == [16] * 11 + [4]
    first_step = events.index(("n", 16))
    assert ("total", 180) in events[:first_step] and ("phase", "computing statistics") in events[:first_step]
    assert events[0] == ("phase", "listing tensors") and ("phase", "committing") in events


def test_duckdbs_own_bar_is_off_on_the_writers_connection_and_cursors():
    """DuckDB draws a bar of its own on stdout (into a pipe too) for a statement of over 2 s, as a big
    ingest's resolution and last merge are: the writer's connection and its cursors have it off."""
    from ingest.storage.flat import open_writer_connection, writer_cursor

    con = open_writer_connection()
    try:
        setting = "SELECT current_setting('enable_progress_bar')"
        assert con.execute(setting).fetchone() == (False,)
        assert writer_cursor(con).execute(setting).fetchone() == (False,)
    finally:
        con.close()
