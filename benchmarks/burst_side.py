"""The burst figure of bench_mom_events.py (10,000 one-shots due at one instant on 2,000 channels), for several
copies of the module side by side: each round runs every copy once, in turn, so a busy moment of this shared
machine falls on all of them alike.  Usage: python benchmarks/burst_side.py DIR [DIR ...] [--rounds 3]"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "bench_mom_events.py"
ONE = f"""import sys
sys.argv = ["bench", "--module", sys.argv[1], "--quick"]
__file__ = {str(BENCH)!r}  # the benchmark's definitions, without its main
exec(open(__file__).read().split("def main()")[0])
print(json.dumps(burst(10000, 2000)))
"""

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("modules", nargs="+", help="directories holding a mom_events.py")
parser.add_argument("--rounds", type=int, default=3)
args = parser.parse_args()
runs: dict[str, list[float]] = {module: [] for module in args.modules}
for _ in range(args.rounds):
    for module in args.modules:
        out = subprocess.run([sys.executable, "-c", ONE, module], capture_output=True, text=True, timeout=600)
        took, count = json.loads(out.stdout.strip().splitlines()[-1])
        runs[module].append(round(took, 2) if count == 10000 else float("nan"))
for module, took in runs.items():
    print(f"{module}: median {statistics.median(took)} s; runs {', '.join(map(str, took))}")
