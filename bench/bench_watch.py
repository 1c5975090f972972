"""Live watcher benchmark: sustained write rate against the latency until a tensor is queryable.

For each rate R (files/s), in a fresh temp dir, three processes run side by side:

- writer: writes synthetic MindSpore npy files (names, headers and kernels of ``bench/synth.py``) at R
  files/s into new iteration folders ``rank_0/Net/0/{it}/`` (``--files-per-iter`` files each), appends
  the global execution history line when an iteration starts and, with ``--csv``, a
  ``statistic.csv`` row just before each file (MindSpore's order). It records each file's
  write-completion time (``time.time()`` after ``close``).
- watcher: ``ingest.watch.Watcher`` (what ``dumpcat watch`` runs) with ``--interval``; its commit and
  compaction calls are timed by wrapping them in this script (no change to the watcher).
- reader: a ``Catalog`` polling ``SELECT rel_path, timestamp_us FROM tensors WHERE timestamp_us >= ?``
  every ``--reader-poll`` s, recording when each file first appears.

Latency of a file = first time the reader saw it - its write-completion time (so it includes up to
one reader poll plus the query). After the writer stops, the run waits until every file was seen
(or ``--drain`` s). Reported per rate: achieved write rate, latency p50/p95/p99/max, files never
seen, time to drain, the watcher's CPU (process tree, psutil), commits, compactions (count and time
each), live batches and parquet files over time, the reader's query time.

    python bench/bench_watch.py                                # rates 500,1000,2000; 20 s each
    python bench/bench_watch.py --rates 2000 --duration 60 --csv
    python bench/bench_watch.py --json results.json

Target (issue): a tensor queryable within 2 s (p95) while training writes 2,000 files/s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import emit  # noqa: E402
import synth  # noqa: E402

RUN = "bench"
CAP = {"float32": "Float32", "int32": "Int32", "int64": "Int64", "bool": "Bool"}
STAT_HEADER = (
    "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
    "Max Value,Min Value,L2Norm Value\n"
)


# --------------------------------------------------------------------------------------------------
# The dump being written


def write_static(dump: Path, files_per_iter: int, seed: int) -> None:
    """Compile-time files of rank 0 (written before the watcher starts, as MindSpore does)."""
    kernels, _ = synth.build_template(files_per_iter, seed)
    rank = dump / "rank_0"
    (rank / ".dump_metadata").mkdir(parents=True)
    (rank / ".dump_metadata" / "config.json").write_text('{"device_target":"CPU","ms_version":"2.10.0"}')
    (rank / "execution_order").mkdir()
    (rank / "execution_order" / "ms_execution_order_graph_0.csv").write_text(
        "NodeExecutionOrder-FullNameWithScope\n" + "".join(k + "\n" for k in kernels)
    )


def _payloads(specs, seed: int) -> list[tuple[bytes, str]]:
    """(npy bytes, statistic.csv values) of each tensor of the template, drawn once."""
    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        if s.dtype == "float32":
            arr = rng.standard_normal(s.shape, dtype=np.float32)
        elif s.dtype == "bool":
            arr = rng.random(s.shape) < 0.5
        else:
            arr = rng.integers(0, 10, s.shape).astype(s.dtype)
        v = arr.astype(np.float64)
        shape = '"(' + ",".join(map(str, s.shape)) + ')"'
        stats = f"{arr.nbytes},{s.dtype},{shape},{v.max():g},{v.min():g},{math.sqrt((v * v).sum()):g},\n"
        out.append((synth.npy_header(s.dtype, s.shape) + arr.tobytes(), stats))
    return out


def writer(
    dump: str, rate: float, duration: float, files_per_iter: int, csv: bool, seed: int, log: str
) -> None:
    _, specs = synth.build_template(files_per_iter, seed)
    payloads = _payloads(specs, seed)
    root = Path(dump)
    history = root / "rank_0" / "execution_order" / "ms_global_execution_order_graph_0.csv"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    names: list[str] = []
    done: list[float] = []
    t0 = time.monotonic()
    started = time.time()
    k = 0
    last_ts = 0
    it = 0
    behind = 0.0
    while time.monotonic() - t0 < duration:
        rel_dir = f"rank_0/Net/0/{it}"
        os.makedirs(root / rel_dir)
        with open(history, "a") as fh:
            fh.write(f"{it}\n")
        csv_fd = None
        if csv:
            csv_fd = os.open(root / rel_dir / "statistic.csv", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(csv_fd, STAT_HEADER.encode())
        dfd = os.open(root / rel_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for s, (data, stats) in zip(specs, payloads, strict=True):
                now = time.monotonic()
                due = t0 + k / rate
                if due - now > 0.001:
                    time.sleep(due - now)
                else:
                    behind = max(behind, now - due)
                if time.monotonic() - t0 >= duration:
                    break
                ts = max(last_ts + 1, int(time.time() * 1e6))
                last_ts = ts
                name = f"{s.op_type}.{s.op_name}.0.0.{ts}.{s.io}.{s.slot}.DefaultFormat.{CAP[s.dtype]}.npy"
                if csv_fd is not None:
                    os.write(csv_fd, f"{s.op_type},{s.op_name},0,0,{ts},{s.io},{s.slot},{stats}".encode())
                fd = os.open(name, flags, 0o644, dir_fd=dfd)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
                done.append(time.time())
                names.append(f"{rel_dir}/{name}")
                k += 1
        finally:
            os.close(dfd)
            if csv_fd is not None:
                os.close(csv_fd)
        it += 1
    ended = time.time()
    Path(log).write_text(json.dumps({
        "names": names, "done": done, "started": started, "ended": ended, "iterations": it,
        "max_behind_s": behind,
    }))  # fmt: skip


# --------------------------------------------------------------------------------------------------
# The watcher, instrumented from outside


def watcher(dump: str, cat: str, interval: float, log: str) -> None:
    import resource
    import warnings

    from ingest.watch import Watcher

    # watchdog's inotify emitter warns when a directory is re-added (noise for this benchmark).
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="watchdog")

    w = Watcher(cat, dump, RUN, interval=interval)
    commits: list[tuple[float, float]] = []  # (end time, seconds)
    compactions: list[tuple[float, float, int]] = []  # (end time, seconds, batches merged)
    commit, compact = w.ingester.commit, w.store.compact

    def timed_commit() -> None:
        t = time.perf_counter()
        commit()
        commits.append((time.time(), time.perf_counter() - t))

    def timed_compact(*args, **kw) -> int:
        t = time.perf_counter()
        merged = compact(*args, **kw)
        if merged:
            compactions.append((time.time(), time.perf_counter() - t, merged))
        return merged

    w.ingester.commit = timed_commit
    w.store.compact = timed_compact
    signal.signal(signal.SIGTERM, lambda *_: w.request_stop())
    w.start()
    while w.running():
        time.sleep(0.05)
    w.stop()
    ru_self = resource.getrusage(resource.RUSAGE_SELF)
    ru_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(log).write_text(json.dumps({
        "commits": commits, "compactions": compactions, "status": w.status(),
        "cpu_self": ru_self.ru_utime + ru_self.ru_stime,
        "cpu_children": ru_children.ru_utime + ru_children.ru_stime,
    }))  # fmt: skip


# --------------------------------------------------------------------------------------------------
# The reader


def reader(cat: str, poll: float, window_s: float, log: str) -> None:
    from catalog import Catalog

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not (Path(cat) / "snapshot.json").exists() and not stop:
        time.sleep(0.05)
    c = Catalog.open(cat)
    seen: dict[str, float] = {}
    query_s: list[float] = []
    watermark = 0
    q = "SELECT rel_path, timestamp_us FROM tensors WHERE timestamp_us >= ?"
    while not stop:
        t = time.time()
        res = c.sql(q, [watermark]).to_pydict()
        now = time.time()
        query_s.append(now - t)
        for rel in res["rel_path"]:
            if rel not in seen:
                seen[rel] = now
        if res["timestamp_us"]:
            watermark = max(watermark, max(res["timestamp_us"]) - int(window_s * 1e6))
        time.sleep(poll)
    # Anything a delayed commit brought in below the watermark: seen now (an upper bound).
    now = time.time()
    for rel in c.sql("SELECT rel_path FROM tensors").column(0).to_pylist():
        seen.setdefault(rel, now)
    Path(log).write_text(json.dumps({"seen": seen, "query_s": query_s}))


# --------------------------------------------------------------------------------------------------
# One run


def _tree_cpu(proc, known: dict[int, float]) -> float:
    """CPU seconds of a process and its children so far (children that ended keep their last figure)."""
    import psutil

    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            t = p.cpu_times()
            known[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return sum(known.values())


def _catalog_shape(cat: Path) -> tuple[int, int]:
    """(live batches in the snapshot, parquet files on disk)."""
    try:
        snap = json.loads((cat / "snapshot.json").read_text())
    except (OSError, ValueError):
        return 0, 0
    files = sum(1 for _ in (cat / "data").rglob("*.parquet")) if (cat / "data").exists() else 0
    return len(snap.get("batches", [])), files


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def run_rate(work: Path, rate: float, a: argparse.Namespace) -> dict:
    import psutil

    load_start = os.getloadavg()[0]
    dump, cat = work / "dump", work / "cat"
    logs = {k: work / f"{k}.json" for k in ("writer", "watcher", "reader")}
    write_static(dump, a.files_per_iter, a.seed)
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    w = subprocess.Popen(
        [*me, "_watcher", str(dump), str(cat), str(a.interval), str(logs["watcher"])], env=env
    )
    ps = psutil.Process(w.pid)
    deadline = time.monotonic() + 60
    while not (cat / "watch").exists() and time.monotonic() < deadline:  # first commit done
        time.sleep(0.05)
    r = subprocess.Popen([*me, "_reader", str(cat), str(a.reader_poll), "10", str(logs["reader"])], env=env)
    time.sleep(1.0)  # reader started (imports)
    cpu_known: dict[int, float] = {}
    cpu0 = _tree_cpu(ps, cpu_known)
    t0 = time.time()
    wr = subprocess.Popen(
        [*me, "_writer", str(dump), str(rate), str(a.duration), str(a.files_per_iter), str(int(a.csv)),
         str(a.seed), str(logs["writer"])], env=env,
    )  # fmt: skip
    shape: list[tuple[float, int, int]] = []
    while wr.poll() is None:
        time.sleep(0.5)
        _tree_cpu(ps, cpu_known)
        shape.append((time.time() - t0, *_catalog_shape(cat)))
    t_write_end = time.time()
    cpu_write = _tree_cpu(ps, cpu_known) - cpu0
    wlog = json.loads(logs["writer"].read_text())
    n = len(wlog["names"])
    # Drain: until the watcher's catalog holds every file (checked through the status file).
    drained_at = None
    deadline = time.monotonic() + a.drain
    while time.monotonic() < deadline:
        try:
            st = json.loads((cat / "watch" / f"{RUN}.json").read_text())
        except (OSError, ValueError):
            st = {}
        _tree_cpu(ps, cpu_known)
        if st.get("tensors", 0) >= n:
            drained_at = time.time()
            break
        time.sleep(0.1)
        shape.append((time.time() - t0, *_catalog_shape(cat)))
    time.sleep(max(0.5, 3 * a.reader_poll))  # let the reader see the last commit
    cpu_total = _tree_cpu(ps, cpu_known) - cpu0
    t_end = time.time()
    r.send_signal(signal.SIGTERM)
    r.wait(60)
    w.send_signal(signal.SIGTERM)
    w.wait(120)
    shape.append((time.time() - t0, *_catalog_shape(cat)))
    rlog = json.loads(logs["reader"].read_text())
    wat = json.loads(logs["watcher"].read_text())
    seen = rlog["seen"]
    pairs = [(d, seen[name] - d) for name, d in zip(wlog["names"], wlog["done"], strict=True) if name in seen]
    lat = [x for _, x in pairs]
    # p95 per quarter of the writing time: does latency drift as the catalog grows?
    t_w0, span = wlog["started"], max(1e-9, wlog["ended"] - wlog["started"])
    quarters = [[x for d, x in pairs if min(3, int(4 * (d - t_w0) / span)) == q] for q in range(4)]
    missing = n - len(lat)
    write_s = wlog["ended"] - wlog["started"]
    commits = [c[1] for c in wat["commits"] if c[0] >= wlog["started"]]
    comps = [c for c in wat["compactions"] if c[0] >= wlog["started"]]
    return {
        "rate_target": rate,
        "files": n,
        "iterations": wlog["iterations"],
        "rate_achieved": n / write_s,
        "writer_max_behind_s": wlog["max_behind_s"],
        "lat_p50": pct(lat, 50),
        "lat_p95": pct(lat, 95),
        "lat_p99": pct(lat, 99),
        "lat_max": max(lat) if lat else float("nan"),
        "lat_p95_by_quarter": [round(pct(q, 95), 3) for q in quarters],
        "missing": missing,
        "drain_s": max(0.0, drained_at - wlog["ended"]) if drained_at else None,
        "watcher_cpu_pct_during_writes": 100 * cpu_write / (t_write_end - t0),
        "watcher_cpu_s_total": cpu_total,
        "watcher_cpu_pct_total": 100 * cpu_total / (t_end - t0),
        "commits": len(commits),
        "commit_p50_s": pct(commits, 50),
        "commit_p95_s": pct(commits, 95),
        "commit_max_s": max(commits) if commits else float("nan"),
        "compactions": len(comps),
        "compaction_s": [round(c[1], 3) for c in comps],
        "compaction_merged": [c[2] for c in comps],
        "max_live_batches": max((s[1] for s in shape), default=0),
        "final_live_batches": shape[-1][1] if shape else 0,
        "max_parquet_files": max((s[2] for s in shape), default=0),
        "final_parquet_files": shape[-1][2] if shape else 0,
        "batches_over_time": [(round(t, 1), b, f) for t, b, f in shape[:: max(1, len(shape) // 12)]],
        "reader_polls": len(rlog["query_s"]),
        "reader_query_p50_ms": 1000 * pct(rlog["query_s"], 50),
        "reader_query_p95_ms": 1000 * pct(rlog["query_s"], 95),
        "watcher_status": wat["status"],
        "load_avg_start": load_start,
        "load_avg_end": os.getloadavg()[0],
    }


def report(results: list[dict], a: argparse.Namespace) -> str:
    lines = [
        f"Duration {a.duration:g} s per rate, {a.files_per_iter} files per iteration folder, watcher "
        f"interval {a.interval:g} s, reader poll {a.reader_poll:g} s, statistic.csv: "
        f"{'yes (row before each file)' if a.csv else 'no (stats computed by the watcher)'}. "
        f"nproc {len(os.sched_getaffinity(0))}.",
        "",
        "| target files/s | achieved files/s | files | latency p50 | p95 | p99 | max | never seen "
        "| drain after writes stop | watcher CPU (of 1 core) | commits (p50 / max s) "
        "| compactions (s each) | live batches max / end | parquet files max / end | reader query p50 |",
        "|" + "---|" * 15,
    ]
    for r in results:
        drain = f"{r['drain_s']:.2f} s" if r["drain_s"] is not None else "not drained"
        comp = f"{r['compactions']} ({', '.join(f'{s:.2f}' for s in r['compaction_s'][:6])})"
        lines.append(
            f"| {r['rate_target']:,.0f} | {r['rate_achieved']:,.0f} | {r['files']:,} | {r['lat_p50']:.2f} s "
            f"| **{r['lat_p95']:.2f} s** | {r['lat_p99']:.2f} s | {r['lat_max']:.2f} s | {r['missing']} "
            f"| {drain} | {r['watcher_cpu_pct_during_writes']:.0f}% | {r['commits']} "
            f"({r['commit_p50_s']:.2f} / {r['commit_max_s']:.2f}) | {comp} "
            f"| {r['max_live_batches']} / {r['final_live_batches']} "
            f"| {r['max_parquet_files']} / {r['final_parquet_files']} | {r['reader_query_p50_ms']:.0f} ms |"
        )
    target = [r for r in results if r["rate_target"] == 2000]
    if target:
        ok = target[0]["lat_p95"] <= 2.0 and target[0]["missing"] == 0
        lines += ["", f"Target p95 ≤ 2 s at 2,000 files/s: **{'pass' if ok else 'MISS'}** "
                      f"(p95 {target[0]['lat_p95']:.2f} s)."]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_writer":
        d, rate, dur, fpi, csv, seed, log = argv[1:]
        writer(d, float(rate), float(dur), int(fpi), csv == "1", int(seed), log)
        return 0
    if argv and argv[0] == "_watcher":
        watcher(argv[1], argv[2], float(argv[3]), argv[4])
        return 0
    if argv and argv[0] == "_reader":
        reader(argv[1], float(argv[2]), float(argv[3]), argv[4])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="500,1000,2000", help="files/s, comma-separated")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of writing per rate")
    p.add_argument("--files-per-iter", type=int, default=1000)
    p.add_argument("--csv", action="store_true", help="write a statistic.csv row before each file")
    p.add_argument("--interval", type=float, default=0.5, help="watcher interval (dumpcat watch default)")
    p.add_argument("--reader-poll", type=float, default=0.1)
    p.add_argument(
        "--drain", type=float, default=60.0, help="max seconds to wait for the watcher to catch up"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="where to write (default: a temp dir, deleted)")
    p.add_argument("--json", default=None, help="also write the raw results here")
    a = p.parse_args(argv)
    results = []
    base = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="dumpcat-bench-watch-"))
    try:
        for rate in (float(x) for x in a.rates.split(",")):
            work = base / f"rate_{rate:g}"
            work.mkdir(parents=True)
            print(
                f"rate {rate:g} files/s for {a.duration:g} s (load {os.getloadavg()[0]:.2f}) ...",
                file=sys.stderr,
            )
            res = run_rate(work, rate, a)
            print(
                f"  achieved {res['rate_achieved']:,.0f}/s, latency p50 {res['lat_p50']:.2f} s, "
                f"p95 {res['lat_p95']:.2f} s, max {res['lat_max']:.2f} s, missing {res['missing']}, "
                f"watcher CPU {res['watcher_cpu_pct_during_writes']:.0f}%, commits {res['commits']}, "
                f"compactions {res['compactions']}",
                file=sys.stderr,
            )
            results.append(res)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if not a.workdir:
            shutil.rmtree(base, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    for r in results:
        at_target = r["rate_target"] == 2000
        emit.summary(
            f"`dumpcat watch`: a tensor queryable after its file is complete, at {r['rate_target']:,.0f} "
            f"files/s{' with statistic.csv' if a.csv else ''}",
            "p95 < 2 s" if at_target else "",
            f"p95 {r['lat_p95']:.2f} s ({r['rate_achieved']:,.0f} files/s achieved, {r['missing']} unseen)",
            (r["lat_p95"] <= 2.0 and r["missing"] == 0) if at_target else None,
        )
    emit.report_follows()
    print(report(results, a))
    if results:
        print("\n```text\nlatency p95 per quarter of the writing time (s):")
        for r in results:
            print(f"  {r['rate_target']:g}/s: {r['lat_p95_by_quarter']}")
        print("\nbatches over time (s since writes started, live batches, parquet files):")
        for r in results:
            print(f"  {r['rate_target']:g}/s: {r['batches_over_time']}")
        loads = ", ".join(f"{r['load_avg_start']:.2f} → {r['load_avg_end']:.2f}" for r in results)
        print(f"load average (1 min) at the start → end of each rate: {loads}")
        print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
