"""Soak test: the real CLI under a steady random load of file churn.

    python benchmarks/soak.py                   # 10 minutes
    python benchmarks/soak.py --duration 60     # a short run

Across 50 channels it keeps creating immediate events, one-shots due within
half a minute (some rewritten or deleted before they are due), and periodic
events with schedules in seconds (deleted after a while), through temporary
names and mv or in place.  Every version of every file has its own text, so
each line the harness prints says exactly which write it came from.  At the
end it prints missed fires, double fires, early fires, fires of versions
that had been cancelled, lateness, and the harness's resident memory and
thread count at the start and the end.  Standard library only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CANCEL_MARGIN = 3.0  # only one-shots due at least this far ahead are rewritten or deleted
WINDOW_MARGIN = 1.0  # periodic boundaries this close to a create or delete are not judged


@dataclass
class Version:
    kind: str
    name: str
    text: str
    written: float
    due: float | None = None          # one-shot
    step: int | None = None           # periodic, seconds
    cancelled: float | None = None    # rewritten or deleted at (periodic: judged up to then)
    fires: list = field(default_factory=list)  # (firedAt, read at)


def process_figures(pid: int) -> tuple[float, int]:
    rss, threads = float("nan"), 0
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


class Soak:
    def __init__(self, directory: Path, channels: int, rate: float, seed: int):
        self.dir = directory
        self.channels = [f"C{i:02d}" for i in range(channels)]
        self.rate = rate
        self.rng = random.Random(seed)
        self.serial = itertools.count()
        self.versions: dict[str, Version] = {}   # text -> version
        self.live_one_shots: dict[str, Version] = {}
        self.live_periodic: dict[str, Version] = {}
        self.lines: queue.Queue = queue.Queue()
        self.unknown = 0

    def write(self, name: str, obj: dict, atomic: bool) -> None:
        data = json.dumps(obj)
        if atomic:
            tmp = self.dir / f".{name}.tmp"
            tmp.write_text(data)
            os.rename(tmp, self.dir / name)
        else:
            with open(self.dir / name, "w") as file:
                file.write(data)

    def new_version(self, kind: str, name: str, **fields) -> Version:
        text = f"v{next(self.serial)}"
        version = Version(kind, name, text, time.time(), **fields)
        self.versions[text] = version
        return version

    def create_immediate(self):
        version = self.new_version("immediate", f"im-{next(self.serial)}.json")
        self.write(version.name, {"type": "immediate", "channelId": self.rng.choice(self.channels),
                                  "text": version.text}, atomic=self.rng.random() < 0.7)

    def write_one_shot(self, name: str):
        due = time.time() + self.rng.uniform(0.5, 30)
        version = self.new_version("one-shot", name, due=due)
        at = datetime.fromtimestamp(due, UTC).isoformat()
        self.write(name, {"type": "one-shot", "channelId": self.rng.choice(self.channels), "text": version.text,
                          "at": at}, atomic=self.rng.random() < 0.7)
        self.live_one_shots[name] = version

    def changeable_one_shot(self) -> Version | None:
        far = [v for v in self.live_one_shots.values() if v.due - time.time() > CANCEL_MARGIN]
        return self.rng.choice(far) if far else None

    def rewrite_one_shot(self):
        old = self.changeable_one_shot()
        if old is not None:
            old.cancelled = time.time()
            self.write_one_shot(old.name)

    def delete_one_shot(self):
        old = self.changeable_one_shot()
        if old is not None:
            old.cancelled = time.time()
            del self.live_one_shots[old.name]
            os.unlink(self.dir / old.name)

    def create_periodic(self):
        if len(self.live_periodic) >= 20:
            return
        step = self.rng.choice([2, 3, 5])
        version = self.new_version("periodic", f"pe-{next(self.serial)}.json", step=step)
        self.write(version.name, {"type": "periodic", "channelId": self.rng.choice(self.channels),
                                  "text": version.text, "schedule": f"*/{step} * * * * *", "timezone": "UTC"},
                   atomic=True)
        self.live_periodic[version.name] = version

    def delete_periodic(self):
        if self.live_periodic:
            version = self.live_periodic.pop(self.rng.choice(sorted(self.live_periodic)))
            version.cancelled = time.time()
            os.unlink(self.dir / version.name)

    def forget_fired_one_shots(self):
        now = time.time()
        for name in [n for n, v in self.live_one_shots.items() if v.due < now]:
            del self.live_one_shots[name]

    def load(self, duration: float) -> int:
        ops = [(self.create_immediate, 35), (lambda: self.write_one_shot(f"os-{next(self.serial)}.json"), 35),
               (self.rewrite_one_shot, 10), (self.delete_one_shot, 10), (self.create_periodic, 5),
               (self.delete_periodic, 5)]
        actions, weights = zip(*ops, strict=True)
        end, count = time.monotonic() + duration, 0
        next_op = time.monotonic()
        while time.monotonic() < end:
            self.forget_fired_one_shots()
            self.rng.choices(actions, weights)[0]()
            count += 1
            next_op += self.rng.expovariate(self.rate)
            time.sleep(max(0.0, next_op - time.monotonic()))
        return count

    def read(self, stream):
        for line in stream:
            seen = time.time()
            record = json.loads(line)
            version = self.versions.get(record["text"])
            if version is None:
                self.unknown += 1
                continue
            version.fires.append((datetime.fromisoformat(record["firedAt"]).timestamp(), seen))


def judge(soak: Soak, stopped: float) -> dict:
    missed = double = early = ghost = expected = 0
    lateness, detection = [], []
    for version in soak.versions.values():
        fired = [f for f, _ in version.fires]
        if version.kind == "immediate":
            expected += 1
            missed += not version.fires
            double += max(0, len(version.fires) - 1)
            detection += [seen - version.written for _, seen in version.fires[:1]]
        elif version.kind == "one-shot":
            if version.cancelled is not None:
                ghost += len(version.fires)
                continue
            expected += 1
            missed += not version.fires
            double += max(0, len(version.fires) - 1)
            early += sum(f < int(version.due * 1000) / 1000 for f in fired)  # firedAt is cut to the ms
            lateness += [seen - version.due for _, seen in version.fires]
        else:
            start, end = version.written + WINDOW_MARGIN, (version.cancelled or stopped) - WINDOW_MARGIN
            first = int(start // version.step + 1) * version.step
            boundaries = range(first, int(end) + 1, version.step)
            for boundary in boundaries:
                if boundary > end:
                    break
                expected += 1
                hits = [(f, seen) for f, seen in version.fires if boundary <= f + 0.001 < boundary + version.step]
                missed += not hits
                double += max(0, len(hits) - 1)
                lateness += [seen - boundary for _, seen in hits[:1]]
            if version.cancelled is not None:  # deleted: nothing after that
                ghost += sum(f > version.cancelled + WINDOW_MARGIN for f in fired)
            early += sum(f < int(version.written) for f in fired)
    return {"expected": expected, "missed": missed, "double": double, "early": early, "ghost": ghost,
            "lateness": lateness, "detection": detection}


def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (f"p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
            f"max {ordered[-1] * 1000:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of load (default: 600)")
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--rate", type=float, default=20, help="file operations per second (default: 20)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="mom_soak_"))
    proc = subprocess.Popen([sys.executable, str(ROOT / "mom_events.py"), str(directory), "--json", "-q"],
                            stdout=subprocess.PIPE, text=True, bufsize=1)
    soak = Soak(directory, args.channels, args.rate, args.seed)
    reader = threading.Thread(target=soak.read, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        time.sleep(2)
        rss0, threads0 = process_figures(proc.pid)
        warm_up = min(60.0, args.duration / 4)  # first-time allocations, caches, worker threads
        operations = soak.load(warm_up)
        rss_warm, _ = process_figures(proc.pid)
        operations += soak.load(args.duration - warm_up)
        stopped = time.time()
        time.sleep(35)  # every one-shot falls due within 30 s; let the last ones fire
        rss1, threads1 = process_figures(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(60)
        reader.join(10)
        left = sorted(p.name for p in directory.glob("*.json"))
        shutil.rmtree(directory, ignore_errors=True)

    verdict = judge(soak, stopped)
    print(f"soak: {args.duration:g} s of load, {args.channels} channels, {operations:,} file operations "
          f"({len(soak.versions):,} versions written), seed {args.seed}, exit status {status}")
    print(f"fires expected {verdict['expected']:,}: missed {verdict['missed']}, double {verdict['double']}, "
          f"early {verdict['early']}, fires of cancelled versions {verdict['ghost']}, "
          f"lines from no version {soak.unknown}")
    print(f"lateness, due time to line read: {quantiles(verdict['lateness'])}")
    print(f"immediate events, write to line read: {quantiles(verdict['detection'])}")
    print(f"resident memory: {rss0:.1f} MB at the start, {rss_warm:.1f} MB after {warm_up:g} s of load, "
          f"{rss1:.1f} MB at the end; threads: {threads0} at the start, {threads1} at the end")
    print(f"files left: {len(left)} (periodic files the load stopped deleting: {len(soak.live_periodic)})")
    bad = verdict["missed"] + verdict["double"] + verdict["early"] + verdict["ghost"] + soak.unknown
    return 1 if bad or status != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
