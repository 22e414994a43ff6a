"""Benchmark mom_events against its promises: the CLI as a black box (--json, real files), and the same
module in process.  Any copy of the module can be measured, old or new: ``--module DIR`` puts DIR first on
sys.path and runs the CLI as ``python DIR/mom_events.py``.  Prints one table: figure, p50, p95, max,
target, met; then the naive baseline (every file stat'ed every tick, made in the benchmark by patching
the scan, not by a module flag) side by side.

    python benchmarks/bench_mom_events.py [--module DIR]           # about 6 minutes
    python benchmarks/bench_mom_events.py [--module DIR] --quick   # about 3 minutes

Standard library only (plus croniter for the periodic files).  The figures are read, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

PARSER = argparse.ArgumentParser(description=__doc__.splitlines()[0])
PARSER.add_argument("--module", default=str(Path(__file__).resolve().parent.parent),
                    help="the directory holding the mom_events.py to measure (default: this checkout)")
PARSER.add_argument("--quick", action="store_true", help="fewer samples and shorter idle windows")
ARGS = PARSER.parse_args()
MODULE = str(Path(ARGS.module).resolve())
sys.path.insert(0, MODULE)
import mom_events  # noqa: E402  (the module under test, from --module)

FAR = "0 0 1 1 *"  # a periodic schedule that stays idle through the run
INTERVAL = inspect.signature(mom_events.EventsWatcher).parameters["poll_interval"].default
PHASES = random.Random(4)  # pauses before writes, drawn at random so they land anywhere in the poll cycle

# The naive baseline: the module's own CLI, with its scan patched to stat every file every tick.
NAIVE = """import sys, time
sys.path.insert(0, sys.argv[1])
import mom_events as m
if hasattr(m, "_FAST_SCAN"):  # 0.1: its own switch
    m._FAST_SCAN = False
else:  # 0.2: its sweep stats every known file at every poll
    m._SWEEP_RATE = 10**9
sys.exit(m.main(sys.argv[2:]))
"""


class Harness:
    """The CLI on a directory; its --json lines arrive on a queue with the time the benchmark read them."""

    def __init__(self, directory: Path, naive: bool = False):
        cli = ["-c", NAIVE, MODULE] if naive else [os.path.join(MODULE, "mom_events.py")]
        self.proc = subprocess.Popen([sys.executable, *cli, str(directory), "--json", "-q"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.time(), json.loads(line)))

    def next(self, timeout=30.0):
        return self.lines.get(timeout=max(0.0, timeout))

    def wait_ready(self, directory: Path):
        """Ready once a probe event written now comes back."""
        write_atomic(directory / "zz-probe.json", {"type": "immediate", "channelId": "probe", "text": "probe"})
        while self.next(120)[1]["filename"] != "zz-probe.json":
            pass

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as file:
            return next(int(line.split()[1]) / 1024 for line in file if line.startswith("VmRSS:"))

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def cpu_seconds(pid: int) -> float:
    """CPU time of all a process's threads, to the nanosecond (schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as file:
                total += int(file.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def cpu_shares(pids: list[int], seconds: float) -> list[list[float]]:
    """Share of one core (%) each process uses, per one-second window, measured side by side."""
    shares: list[list[float]] = [[] for _ in pids]
    for _ in range(int(seconds)):
        before, t0 = [cpu_seconds(pid) for pid in pids], time.monotonic()
        time.sleep(1.0)
        elapsed = time.monotonic() - t0
        for share, pid, c0 in zip(shares, pids, before, strict=True):
            share.append(100 * (cpu_seconds(pid) - c0) / elapsed)
    return shares


def write_atomic(path: Path, obj):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj))
    os.rename(tmp, path)


def write_in_place(path: Path, obj):
    with open(path, "w") as file:
        file.write(json.dumps(obj))


def fill(directory: Path, count: int):
    for i in range(count):
        (directory / f"filler-{i:05d}.json").write_text(json.dumps(
            {"type": "periodic", "channelId": f"F{i % 50}", "text": f"filler {i}", "schedule": FAR, "timezone": "UTC"}))


@contextlib.contextmanager
def fresh_dir():
    directory = Path(tempfile.mkdtemp(prefix="mom_bench_"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def percentiles(values):
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
    return statistics.median(ordered), pick(0.95), ordered[-1]


def new_file(directory: Path, i: int) -> str:
    """A new immediate event, renamed into place or created in place in turn."""
    path = directory / f"new-{i:04d}.json"
    (write_atomic if i % 2 == 0 else write_in_place)(
        path, {"type": "immediate", "channelId": f"L{i % 3}", "text": f"sample {i}"})
    return path.name


def rewrite_in_place(directory: Path, i: int) -> str:
    """An idle periodic file rewritten in place into an immediate event: the directory's mtime stays."""
    path = directory / f"filler-{(i * 37) % 1000:05d}.json"
    write_in_place(path, {"type": "immediate", "channelId": f"R{i % 3}", "text": f"rewrite {i}"})
    return path.name


def write_to_line(others: int, samples: int, naive: bool, write, inside: bool = False) -> list[float]:
    """Seconds from ``write(directory, i)`` to that file's line on the CLI's stdout (``inside``: to the
    handler's first line, in process), with ``others`` idle periodic files beside it."""
    entered: queue.Queue = queue.Queue()

    with fresh_dir() as directory:
        fill(directory, others)
        if inside:
            put = lambda e: entered.put((time.time(), {"filename": e.filename}))
            watcher = mom_events.EventsWatcher(directory, put)
            watcher.start()
            next_line, close = entered.get, lambda: watcher.stop(5)
        else:
            cli = Harness(directory, naive)
            next_line, close = cli.next, cli.close
        try:
            if not inside:
                cli.wait_ready(directory)
            latencies = []
            for i in range(samples):
                time.sleep(0.05 + PHASES.uniform(0, 0.2))  # land anywhere in the poll cycle
                t0 = time.time()
                name = write(directory, i)
                seen, record = next_line(timeout=30)
                assert record["filename"] == name, record
                latencies.append(seen - t0)
            return latencies
        finally:
            close()


def idle_cpu(files: int, seconds: float, naive: bool) -> list[float]:
    with fresh_dir() as directory:
        fill(directory, files)
        cli = Harness(directory, naive)
        try:
            cli.wait_ready(directory)
            time.sleep(2.5)  # racy rechecks and the first sweeps settle
            return cpu_shares([cli.proc.pid], seconds)[0]
        finally:
            cli.close()


FLOORS = {  # a bare thread waking at the poll interval, doing nothing else
    "time.sleep": "import time\nwhile True: time.sleep(INTERVAL)",
    "Event.wait": "import threading\ne = threading.Event()\nwhile True: e.wait(INTERVAL)",
}


def idle_floors(seconds: float) -> dict[str, list[float]]:
    procs = {name: subprocess.Popen([sys.executable, "-c", code.replace("INTERVAL", repr(INTERVAL))])
             for name, code in FLOORS.items()}
    try:
        time.sleep(1.0)
        return dict(zip(procs, cpu_shares([proc.pid for proc in procs.values()], seconds), strict=True))
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(30)


def one_shots(directory: Path, count: int, spacing: float) -> dict[str, float]:
    """``count`` one-shots due from 1.5 s on, ``spacing`` apart (plus a jitter); their due times by name."""
    base, dues = time.time() + 1.5, {}
    for i in range(count):
        due = base + i * spacing + (i % 7) * 0.0123
        dues[f"os-{i:03d}.json"] = due
        write_atomic(directory / f"os-{i:03d}.json", {"type": "one-shot", "channelId": f"O{i % 4}", "text": "due",
                                                       "at": datetime.fromtimestamp(due, UTC).isoformat()})
    return dues


def lateness(count: int, inside: bool) -> tuple[list[float], int]:
    """Seconds from each one-shot's due time to its line on the CLI's stdout (``inside``: to the handler's
    first line, in process); and how many fired early."""
    entered: queue.Queue = queue.Queue()
    with fresh_dir() as directory:
        if inside:
            put = lambda e: entered.put((time.time(), {"filename": e.filename, "firedAt": None}))
            watcher = mom_events.EventsWatcher(directory, put)
            watcher.start()
            next_line, close = entered.get, lambda: watcher.stop(5)
        else:
            cli = Harness(directory)
            cli.wait_ready(directory)
            next_line, close = cli.next, cli.close
        try:
            dues = one_shots(directory, count, 0.1 if inside else 0.15)
            late, early = [], 0
            for _ in range(count):
                seen, record = next_line(timeout=30)
                due = dues[record["filename"]]
                fired = datetime.fromisoformat(record["firedAt"]).timestamp() if record["firedAt"] else seen
                early += fired < int(due * 1000) / 1000  # firedAt is cut to the millisecond
                late.append(seen - due)
            return late, early
        finally:
            close()


def startup(files: int) -> tuple[float, float]:
    """Seconds from launching the CLI on ``files`` periodic files until an immediate event written at launch
    comes out; and resident MB 2.5 s later."""
    with fresh_dir() as directory:
        fill(directory, files)
        os.sync()
        t0 = time.time()
        cli = Harness(directory)
        try:
            write_atomic(directory / "first.json", {"type": "immediate", "channelId": "S", "text": "first"})
            seen, record = cli.next(120)
            assert record["filename"] == "first.json", record
            time.sleep(2.5)
            return seen - t0, cli.rss_mb()
        finally:
            cli.close()


def burst(files: int, channels: int) -> tuple[float, int]:
    """``files`` one-shots due at one instant across ``channels`` channels: seconds from it to the last
    line, and how many came."""
    with fresh_dir() as directory:
        due = float(int(time.time()) + 8)
        at = datetime.fromtimestamp(due, UTC).isoformat()
        for i in range(files):
            (directory / f"b-{i:05d}.json").write_text(json.dumps(
                {"type": "one-shot", "channelId": f"B{i % channels}", "text": f"burst {i}", "at": at}))
        cli = Harness(directory)
        last, count = None, 0
        try:
            while count < files:
                last, _ = cli.next(timeout=due + 30 - time.time())
                count += 1
        except queue.Empty:
            pass
        finally:
            cli.close()
        return (last - due if last else float("nan")), count


def number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main() -> int:
    quick = ARGS.quick
    n_new, idle_s = (20, 5) if quick else (60, 15)
    rows, naive_rows = [], []

    def row(figure, values, unit, target, met):
        p50, p95, top = percentiles(values) if isinstance(values, list) else (values, values, values)
        rows.append((figure, p50, p95, top, unit, target, "yes" if met is True else "NO" if met is False else met))
        scale = 1000 if unit == "ms" else 1
        print(f"  {figure}: p50 {number(p50 * scale)} {unit}, p95 {number(p95 * scale)} {unit}", file=sys.stderr,
              flush=True)

    target = "p50 <= 25, p95 <= 50"
    for others in (0, 100, 1000):
        fast = write_to_line(others, n_new, False, new_file)
        p50, p95, _ = percentiles(fast)
        row(f"new file to line on the CLI's stdout, {others:,} other files", fast, "ms", target,
            p50 <= 0.025 and p95 <= 0.050)
        inside = write_to_line(others, n_new, False, new_file, inside=True)
        p50, p95, _ = percentiles(inside)
        row(f"new file to handler in process, {others:,} other files", inside, "ms", target,
            p50 <= 0.025 and p95 <= 0.050)
    naive = write_to_line(1000, n_new, True, new_file)
    naive_rows.append(("new file to line, 1,000 files", percentiles(naive)[0], rows[-2][1], "ms"))

    rewrite = write_to_line(1000, 10 if quick else 30, False, rewrite_in_place)
    row("in-place rewrite to line, 1,000 files", rewrite, "ms", "p95 <= 1000", percentiles(rewrite)[1] <= 1.0)
    naive = write_to_line(1000, 10 if quick else 30, True, rewrite_in_place)
    naive_rows.append(("in-place rewrite to line, 1,000 files", percentiles(naive)[0], rows[-1][1], "ms"))

    for name, floor in idle_floors(idle_s).items():
        row(f"idle floor: a bare thread, {name}({INTERVAL}) in a loop", floor, "%", "(the machine's floor)", "-")
    for files, limit in ((1000, 0.5), (10000, 1.0)):
        shares = idle_cpu(files, idle_s, naive=False)
        row(f"idle CPU, {files:,} files", shares, "%", f"<= {limit} % of a core", statistics.median(shares) <= limit)
        naive = idle_cpu(files, idle_s, naive=True)
        naive_rows.append((f"idle CPU, {files:,} files", statistics.median(naive), statistics.median(shares), "%"))

    late, early = lateness(20, inside=False)
    row(f"one-shot lateness via the CLI, 20 events ({early} early)", late, "ms", "p50 <= 1, never early",
        percentiles(late)[0] <= 0.001 and early == 0)
    late, early = lateness(20, inside=True)
    row(f"one-shot lateness in process, 20 events ({early} early)", late, "ms",
        "(for reference)", "-")

    for files, limit in ((1000, 0.5), (10000, 2.0)):
        elapsed, rss = startup(files)
        row(f"start-up to first new event, {files:,} periodic files", elapsed, "s", f"<= {limit} s", elapsed <= limit)
    row("resident memory, 10,000 periodic files", rss, "MB", "<= 40 MB", rss <= 40)

    spread, count = burst(10000, 2000)
    row(f"10,000 one-shots due at once, 2,000 channels ({count} delivered)", spread, "s", "all within 2 s",
        count == 10000 and spread <= 2.0)

    print()
    print(f"mom_events {mom_events.__version__} from {MODULE}, {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}, {'quick' if quick else 'full'} run, "
          f"{datetime.now().isoformat(timespec='seconds')}")
    print()
    print("| figure | p50 | p95 | max | target | met |")
    print("| --- | --- | --- | --- | --- | --- |")
    for figure, p50, p95, top, unit, target, met in rows:
        scale = 1000 if unit == "ms" else 1
        p50, p95, top = (f"{number(v * scale)} {unit}" for v in (p50, p95, top))
        print(f"| {figure} | {p50} | {p95} | {top} | {target} | {met} |")
    print()
    print("Naive baseline (the same module, every file stat'ed every tick), side by side:")
    print()
    print("| figure | naive p50 | fast p50 | ratio |")
    print("| --- | --- | --- | --- |")
    for figure, slow, fast, unit in naive_rows:
        scale = 1000 if unit == "ms" else 1
        ratio = f"{slow / fast:.2g}x" if fast > 0 else "n/a"
        print(f"| {figure} | {number(slow * scale)} {unit} | {number(fast * scale)} {unit} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
