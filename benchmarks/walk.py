"""A file's walk through mom_events: the stages one file's life crosses, in order (parse, then judge, then
queue, then run: issue 44's target is no call back into a stage the walk has left, and for a rejected file no
more than its retries need), how many functions it crosses and how often it calls back into one it already
passed (the lean issue's figures).

The watcher is driven through its public interface, as a caller without a thread would:
``EventsWatcher(..., clock=..., spawn=workers.append)``, ``start(thread=False)`` (the start-up sees the
directory empty), then the file is written and ``step(now)`` is called on simulated time, each held worker
run in turn, until the file is gone (an immediate event: run, then deleted) or renamed (a rejected one:
told, then renamed).  Every call into a function of mom_events.py meanwhile is recorded, on every thread:

- functions: the distinct functions called (``def``s: lambdas and comprehensions are part of the function
  they are written in, and a generator resumed is not called again);
- calls back: calls into a function already called earlier in the walk, once it had returned (recursion is
  not a call back);
- deepest: the most mom_events frames on one stack;
- stages: the calls into each stage's entry (STAGES), in order, and the calls back into a stage the walk had
  already returned from (a retry's read is one).

    python benchmarks/walk.py [--module DIR]           # both walks, a line each
    python benchmarks/walk.py [--module DIR] --calls   # and each walk's calls, indented by depth

The scanner judges a file "racy" (written too recently to trust its stat) on the watcher's clock, so the
simulated time's first step (0.1 s later) already finds it settled; ``--settle S`` waits real seconds first.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

PARSER = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
PARSER.add_argument("--module", default=str(Path(__file__).resolve().parent.parent),
                    help="the directory holding the mom_events.py to walk (default: this checkout)")
PARSER.add_argument("--calls", action="store_true", help="print each walk's calls")
PARSER.add_argument("--settle", type=float, default=0.0, metavar="S",
                    help="real seconds to wait after the write (0.06: the file is no longer racy when first seen)")
ARGS = PARSER.parse_args()
sys.path.insert(0, str(Path(ARGS.module).resolve()))
import mom_events  # noqa: E402  (the module under test, from --module)

FILES = {
    "run and deleted": {"type": "immediate", "channelId": "C1", "text": "hello"},
    "rejected": {"type": "one-shot", "channelId": "C1", "text": "hello", "at": "tomorrow"},
}
STAGES = {"_parse": "parse", "_judge": "judge", "_Channels.put": "queue", "_Runner.run": "run"}
GENERATOR = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class Tracer:
    """Records the calls into mom_events.py, per thread, with their depth."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []  # (depth, qualified name), in order
        self.depth: dict[int, int] = {}
        self.resumable: set[int] = set()  # the generators' frames already called
        self.lock = threading.Lock()

    def __call__(self, frame, event, arg):  # a sys.setprofile function
        code = frame.f_code
        if code.co_filename != mom_events.__file__ or event not in ("call", "return") or code.co_name[0] == "<":
            return
        me = threading.get_ident()
        with self.lock:
            if event == "call":
                depth = self.depth.get(me, 0) + 1
                self.depth[me] = depth
                if code.co_flags & GENERATOR:
                    if id(frame) in self.resumable:
                        return
                    self.resumable.add(id(frame))
                self.calls.append((depth, code.co_qualname))
            else:
                self.depth[me] = self.depth.get(me, 1) - 1

    def figures(self) -> tuple[int, int, int]:
        seen: set[str] = set()
        back = 0
        stack: list[str] = []
        for depth, name in self.calls:
            del stack[depth - 1:]
            if name in seen and name not in stack:
                back += 1
            seen.add(name)
            stack.append(name)
        return len(seen), back, max((depth for depth, _ in self.calls), default=0)

    def stages(self) -> tuple[list[str], int]:
        """The stages entered, in order, and how many entries were into a stage already left."""
        entered = [STAGES[name] for _, name in self.calls if name in STAGES]
        back = sum(stage in entered[:i] for i, stage in enumerate(entered))
        return entered, back


def walk(content: dict[str, object]) -> Tracer:
    with tempfile.TemporaryDirectory(prefix="mom_walk_") as name:
        directory = Path(name)
        now = [time.time()]
        held: list = []
        watcher = mom_events.EventsWatcher(directory, lambda event: None, clock=lambda: now[0], spawn=held.append)
        watcher.start(thread=False)  # the start-up: the directory is empty
        path = directory / "walk.json"
        tracer = Tracer()
        threading.setprofile(tracer)
        sys.setprofile(tracer)
        try:
            path.write_text(json.dumps(content))
            time.sleep(ARGS.settle)  # the scanner's racy rule runs on real time, not on the watcher's clock
            for _ in range(100):
                now[0] += 0.1
                watcher.step(now[0])
                while held:
                    held.pop(0)()
                    watcher.step(now[0], scan=False)
                if not path.exists():
                    break
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        assert not path.exists(), "the file's walk did not end"
        watcher.stop(timeout=1)
        return tracer


def main() -> int:
    for what, content in FILES.items():
        tracer = walk(content)
        functions, back, deepest = tracer.figures()
        entered, stages_back = tracer.stages()
        print(f"{what}: stages {' -> '.join(entered)}, {stages_back} back into a stage left; {functions} functions, "
              f"{back} calls back, {deepest} deep ({len(tracer.calls)} calls)")
        if ARGS.calls:
            for depth, name in tracer.calls:
                print(f"  {'  ' * depth}{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
