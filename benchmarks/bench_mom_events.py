"""Benchmark mom_events as a black box: the CLI in a subprocess (--json) on
real files, plus one in-process figure.  Prints one table: figure, p50, p95,
max, target, met.  A naive baseline (the same module with the scan's fast path
turned off, so every tick stats every file) runs in the same run, and the
ratios are printed beside it.

    python benchmarks/bench_mom_events.py           # about 5 minutes
    python benchmarks/bench_mom_events.py --quick   # under 2 minutes

Standard library only (plus croniter, which mom_events needs for periodic
events).  Nothing here is a test: the figures are read, not asserted.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import mom_events  # noqa: E402  (the module under test, from this checkout)

FAR = "0 0 1 1 *"  # a periodic schedule that stays idle through the run

# Pauses between samples are drawn at random (seeded): fixed pauses land the
# writes on a few fixed points of the poll cycle, and a scan a few ms longer
# then moves every sample's wait at once.
PHASES = random.Random(4)


# -- running the CLI ----------------------------------------------------------


class Harness:
    """The CLI on a directory; its --json lines arrive on a queue with the
    wall-clock time the benchmark read them."""

    def __init__(self, directory: Path, naive: bool = False):
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import mom_events; "
                f"mom_events._FAST_SCAN = {not naive}; sys.exit(mom_events.main(sys.argv[2:]))")
        self.started = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(ROOT), str(directory), "--json", "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put((time.time(), json.loads(line)))

    def next(self, timeout=30.0):
        return self.lines.get(timeout=timeout)

    def wait_ready(self, directory: Path):
        """Ready once a probe event written now comes back."""
        probe = directory / "zz-probe.json"
        write_atomic(probe, {"type": "immediate", "channelId": "probe", "text": "probe"})
        while True:
            _, event = self.next(120)
            if event["filename"] == "zz-probe.json":
                return

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as file:
            for line in file:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """CPU time of all a process's threads, to the nanosecond (schedstat),
    where /proc/PID/stat counts 10 ms ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as file:
                total += int(file.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def cpu_shares(pid: int, seconds: float) -> list[float]:
    """Share of one core (%) the process uses, per one-second window."""
    shares = []
    for _ in range(int(seconds)):
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(1.0)
        shares.append(100 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0))
    return shares


def write_atomic(path: Path, obj):
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj))
    os.rename(tmp, path)


def write_in_place(path: Path, obj):
    with open(path, "w") as file:
        file.write(json.dumps(obj))


def fill(directory: Path, count: int):
    """``count`` periodic events that stay idle through the run."""
    for i in range(count):
        (directory / f"filler-{i:05d}.json").write_text(json.dumps(
            {"type": "periodic", "channelId": f"F{i % 50}", "text": f"filler {i}", "schedule": FAR,
             "timezone": "UTC"}))


def fresh_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="mom_bench_"))


def percentiles(values):
    ordered = sorted(values)
    if not ordered:
        return float("nan"), float("nan"), float("nan")
    def pick(q):
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
    return statistics.median(ordered), pick(0.95), ordered[-1]


# -- the figures ----------------------------------------------------------------


def write_to_line(others: int, samples: int, naive: bool, write) -> list[float]:
    """Seconds from ``write(directory, i)``, which writes one event file and
    returns its name, to that file's line on the CLI's stdout, with
    ``others`` idle periodic files beside it."""
    directory = fresh_dir()
    try:
        fill(directory, others)
        cli = Harness(directory, naive)
        cli.wait_ready(directory)
        latencies = []
        for i in range(samples):
            time.sleep(0.05 + PHASES.uniform(0, 0.2))  # land anywhere in the poll cycle
            t0 = time.time()
            name = write(directory, i)
            seen, record = cli.next()
            assert record["filename"] == name, record
            latencies.append(seen - t0)
        cli.close()
        return latencies
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def new_file(directory: Path, i: int) -> str:
    """A new immediate event, renamed into place or created in place in turn."""
    path = directory / f"new-{i:04d}.json"
    (write_atomic if i % 2 == 0 else write_in_place)(
        path, {"type": "immediate", "channelId": f"L{i % 3}", "text": f"sample {i}"})
    return path.name


def rewrite_in_place(directory: Path, i: int) -> str:
    """An idle periodic file rewritten in place into an immediate event: same
    inode, so the directory's mtime does not change."""
    path = directory / f"filler-{(i * 37) % 1000:05d}.json"
    write_in_place(path, {"type": "immediate", "channelId": f"R{i % 3}", "text": f"rewrite {i}"})
    return path.name


def idle_cpu(files: int, seconds: float, naive: bool) -> list[float]:
    """Share of one core (%) the idle harness uses, per one-second window."""
    directory = fresh_dir()
    try:
        fill(directory, files)
        cli = Harness(directory, naive)
        cli.wait_ready(directory)
        time.sleep(2.5)  # let racy rechecks and the first sweeps settle
        shares = cpu_shares(cli.proc.pid, seconds)
        cli.close()
        return shares
    finally:
        shutil.rmtree(directory, ignore_errors=True)


FLOORS = {  # a bare thread waking at the poll interval, doing nothing else
    "time.sleep (what the scheduler uses)": "import time\nwhile True: time.sleep(INTERVAL)",
    "select.poll on a pipe": "import os, select\nr, w = os.pipe(); p = select.poll(); p.register(r)\n"
                             "while True: p.poll(INTERVAL * 1000)",
    "Lock.acquire(timeout)": "import threading\nl = threading.Lock(); l.acquire()\n"
                             "while True: l.acquire(timeout=INTERVAL)",
    "Condition.wait": "import threading\nc = threading.Condition()\nwith c:\n    while True: c.wait(INTERVAL)",
}


def idle_floors(seconds: float) -> dict[str, list[float]]:
    """What waking alone costs on this machine, for each way of waiting,
    measured side by side (% of one core)."""
    interval = mom_events.EventsWatcher(".", print)._poll_interval
    procs = {name: subprocess.Popen([sys.executable, "-c", code.replace("INTERVAL", repr(interval))])
             for name, code in FLOORS.items()}
    try:
        time.sleep(1.0)
        shares = {name: [] for name in procs}
        for _ in range(int(seconds)):
            before = {name: cpu_seconds(proc.pid) for name, proc in procs.items()}
            t0 = time.monotonic()
            time.sleep(1.0)
            elapsed = time.monotonic() - t0
            for name, proc in procs.items():
                shares[name].append(100 * (cpu_seconds(proc.pid) - before[name]) / elapsed)
        return shares
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def cli_lateness(count: int) -> tuple[list[float], int]:
    """Seconds from each one-shot's due time to its line on stdout; and how
    many fired early (firedAt before the due time)."""
    directory = fresh_dir()
    try:
        cli = Harness(directory)
        cli.wait_ready(directory)
        base = time.time() + 1.5
        dues = {}
        for i in range(count):
            due = base + i * 0.15 + (i % 7) * 0.0123
            at = datetime.fromtimestamp(due, UTC).isoformat()
            dues[f"os-{i:03d}.json"] = due
            write_atomic(directory / f"os-{i:03d}.json",
                         {"type": "one-shot", "channelId": f"O{i % 4}", "text": "due", "at": at})
        late, early = [], 0
        for _ in range(count):
            seen, record = cli.next()
            due = dues[record["filename"]]
            fired = datetime.fromisoformat(record["firedAt"]).timestamp()
            early += fired < int(due * 1000) / 1000  # firedAt is cut to the millisecond
            late.append(seen - due)
        cli.close()
        return late, early
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def inprocess_new_file(others: int, samples: int) -> list[float]:
    """Seconds from writing a new immediate file to the handler's first line,
    in process, with ``others`` idle periodic files beside it."""
    directory = fresh_dir()
    entered: queue.Queue = queue.Queue()
    try:
        fill(directory, others)
        watcher = mom_events.EventsWatcher(directory, lambda e: entered.put((time.time(), e.filename)))
        watcher.start()
        latencies = []
        for i in range(samples):
            time.sleep(0.05 + PHASES.uniform(0, 0.2))
            t0 = time.time()
            name = new_file(directory, i)
            seen, filename = entered.get(timeout=30)
            assert filename == name, filename
            latencies.append(seen - t0)
        watcher.stop()
        return latencies
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def inprocess_lateness(count: int) -> tuple[list[float], int]:
    """Seconds from each one-shot's due time to the handler's first line."""
    directory = fresh_dir()
    entered = {}
    try:
        watcher = mom_events.EventsWatcher(directory, lambda e: entered.setdefault(e.filename, time.time()))
        watcher.start()
        base = time.time() + 1.0
        dues = {}
        for i in range(count):
            due = base + i * 0.1 + (i % 7) * 0.0123
            dues[f"ip-{i:03d}.json"] = due
            at = datetime.fromtimestamp(due, UTC).isoformat()
            write_atomic(directory / f"ip-{i:03d}.json",
                         {"type": "one-shot", "channelId": f"I{i % 4}", "text": "due", "at": at})
        deadline = time.time() + 30
        while len(entered) < count and time.time() < deadline:
            time.sleep(0.05)
        watcher.stop()
        late = [entered[name] - due for name, due in dues.items() if name in entered]
        return late, sum(1 for value in late if value < 0)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def startup(files: int) -> tuple[float, float]:
    """Seconds from launching the CLI on ``files`` periodic files until an
    immediate event written at launch fires; and resident MB after start-up."""
    directory = fresh_dir()
    try:
        fill(directory, files)
        os.sync()
        t0 = time.time()
        cli = Harness(directory)
        write_atomic(directory / "first.json", {"type": "immediate", "channelId": "S", "text": "first"})
        seen, record = cli.next(120)
        assert record["filename"] == "first.json", record
        elapsed = seen - t0
        time.sleep(2.5)
        rss = cli.rss_mb()
        cli.close()
        return elapsed, rss
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def burst(files: int, channels: int) -> tuple[float, int]:
    """``files`` one-shots due in the same second across ``channels``
    channels: seconds from that second to the last line, and how many came."""
    directory = fresh_dir()
    try:
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
        cli.close()
        return (last - due if last else float("nan")), count
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def channel_memory(count: int, hostile: int) -> tuple[float, float, float, float]:
    """Resident MB of the CLI: idle before; when the last of ``count``
    immediate events, each on a channel of its own (IDs of the longest
    allowed length), has run; once their files are gone and the idle workers
    have left; and once ``hostile`` more files, each naming a different
    500 KB channel ID, have been rejected too."""
    directory = fresh_dir()
    try:
        cli = Harness(directory)
        cli.wait_ready(directory)
        settle = mom_events._LINGER + 0.5  # idle workers leave

        def gone(pattern: str, left: int) -> None:
            deadline = time.time() + 120
            while len(list(directory.glob(pattern))) > left and time.time() < deadline:
                time.sleep(0.1)
            time.sleep(settle)

        time.sleep(settle)
        before = cli.rss_mb()
        for i in range(count):
            write_atomic(directory / f"ch-{i:05d}.json",
                         {"type": "immediate", "channelId": f"C{i:05d}".ljust(255, "x"), "text": f"channel {i}"})
        for _ in range(count):
            cli.next(60)
        after = cli.rss_mb()
        gone("ch-*.json", 0)
        idle = cli.rss_mb()
        for i in range(hostile):
            write_atomic(directory / f"big-{i:03d}.json",
                         {"type": "immediate", "channelId": f"{i:03d}".ljust(500_000, "x"), "text": "hostile"})
        gone("big-*.json", 0)  # renamed to .json.rejected
        rejected = cli.rss_mb()
        cli.close()
        return before, after, idle, rejected
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- the table ------------------------------------------------------------------


def number(value: float) -> str:
    """Three significant digits, never in exponent form."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples; under 2 minutes")
    args = parser.parse_args()
    quick = args.quick
    n_new = 20 if quick else 60
    idle_s = 5 if quick else 15
    rows = []

    def row(figure, values, unit, target, met, note=""):
        p50, p95, top = percentiles(values) if isinstance(values, list) else (values, values, values)
        rows.append((figure, p50, p95, top, unit, target, "yes" if met else "NO", note))
        scale = 1000 if unit == "ms" else 1
        print(f"  {figure}: p50 {number(p50 * scale)} {unit}, p95 {number(p95 * scale)} {unit}"
              f"{', ' + note if note else ''}", file=sys.stderr, flush=True)

    ratios = []
    for others in (0, 100, 1000):
        fast = write_to_line(others, n_new, False, new_file)
        p50, p95, _ = percentiles(fast)
        row(f"new file to line on the CLI's stdout, {others} other files", fast, "ms", "p50 <= 25, p95 <= 50",
            p50 <= 0.025 and p95 <= 0.050)
        inside = inprocess_new_file(others, n_new)
        p50, p95, _ = percentiles(inside)
        row(f"new file to handler in process, {others} other files", inside, "ms", "p50 <= 25, p95 <= 50",
            p50 <= 0.025 and p95 <= 0.050)
        if others == 1000:
            naive = write_to_line(others, n_new, True, new_file)
            ratios.append(("new file latency p50, 1,000 files", percentiles(naive)[0], percentiles(fast)[0], "ms"))

    rewrite = write_to_line(1000, 10 if quick else 30, False, rewrite_in_place)
    row("in-place rewrite to callback, 1,000 files", rewrite, "ms", "p95 <= 1000",
        percentiles(rewrite)[1] <= 1.0)
    naive = write_to_line(1000, 10 if quick else 30, True, rewrite_in_place)
    ratios.append(("in-place rewrite latency p50, 1,000 files", percentiles(naive)[0],
                   percentiles(rewrite)[0], "ms"))

    for name, floor in idle_floors(idle_s).items():
        row(f"idle floor, {name}: a bare thread waking at the poll interval", floor, "%", "(for reference)", True)
    for files, limit in ((1000, 0.5), (10000, 1.0)):
        shares = idle_cpu(files, idle_s, naive=False)
        row(f"idle CPU, {files:,} files", shares, "%", f"<= {limit} % of a core",
            statistics.median(shares) <= limit)
        naive = idle_cpu(files, idle_s, naive=True)
        ratios.append((f"idle CPU, {files:,} files", statistics.median(naive), statistics.median(shares), "%"))

    late, early = cli_lateness(20)
    p50, p95, _ = percentiles(late)
    row("one-shot lateness via the CLI, 20 events", late, "ms", "p50 <= 1, p95 <= 2, never early",
        p50 <= 0.001 and p95 <= 0.002 and early == 0, f"{early} early")
    late, early = inprocess_lateness(20)
    p50, p95, _ = percentiles(late)
    row("one-shot lateness in-process, 20 events", late, "ms", "p50 <= 0.35, p95 <= 0.5, never early",
        p50 <= 0.00035 and p95 <= 0.0005 and early == 0, f"{early} early")

    elapsed, rss = startup(10000)
    row("start-up to first new event, 10,000 periodic files", elapsed, "s", "<= 2 s", elapsed <= 2.0)
    row("resident memory, 10,000 periodic files", rss, "MB", "<= 40 MB", rss <= 40)

    channels = 1000 if quick else 3000
    before, after, idle, rejected = channel_memory(channels, 200)
    row(f"resident memory once {channels:,} events on as many channels ran and are gone", idle, "MB",
        "(for reference)", True, f"{before:.1f} MB before, {after:.1f} MB as the last ran")
    row("resident memory once 200 files naming 500 KB channel IDs were rejected", rejected, "MB",
        "(for reference)", True, f"{idle:.1f} MB before")

    spread, count = burst(10000, 2000)
    row("10,000 one-shots due in one second, 2,000 channels", spread, "s", "all within 1 s",
        count == 10000 and spread <= 1.0, f"{count} delivered")

    print()
    print(f"mom_events {mom_events.__version__}, {os.cpu_count()} cores, Python {sys.version.split()[0]},"
          f" {'quick' if quick else 'full'} run, {datetime.now().isoformat(timespec='seconds')}")
    print()
    print("| figure | p50 | p95 | max | target | met |")
    print("| --- | --- | --- | --- | --- | --- |")
    for figure, p50, p95, top, unit, target, met, note in rows:
        scale = 1000 if unit == "ms" else 1
        p50, p95, top = (f"{number(v * scale)} {unit}" for v in (p50, p95, top))
        print(f"| {figure}{' (' + note + ')' if note else ''} | {p50} | {p95} | {top} |"
              f" {target} | {met} |")
    print()
    print("Naive baseline (the same module, every file stat'ed every tick), side by side:")
    print()
    print("| figure | naive p50 | fast p50 | ratio |")
    print("| --- | --- | --- | --- |")
    for figure, naive, fast, unit in ratios:
        scale = 1000 if unit == "ms" else 1
        ratio = f"{naive / fast:.2g}x" if fast > 0 else "n/a"
        print(f"| {figure} | {number(naive * scale)} {unit} | {number(fast * scale)} {unit} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
