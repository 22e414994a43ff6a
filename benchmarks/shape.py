"""The module's shape against the minimal harness's budget (issue 40): lines per part, the largest class
and function, comparisons with an attribute named ``type``, and the suite's uses of the module's private
names.  Standard library only; run from the project directory: ``python benchmarks/shape.py [ROOT]``.
"""

import ast
import re
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
source = (root / "mom_events.py").read_text()
tests = (root / "test_mom_events.py").read_text()
tree = ast.parse(source)

# The parts are the module's banners: "# --- Title: what it is ---"
lines = source.splitlines()
starts = [(i, line[6:].split(":")[0]) for i, line in enumerate(lines) if line.startswith("# --- ")]
bounds = [(0, "header")] + starts + [(len(lines), "")]
print(f"mom_events.py: {len(lines)} lines (budget 2,200)")
for (begin, name), (end, _) in zip(bounds, bounds[1:], strict=False):
    print(f"  {end - begin:5} {name}")

sizes = [(n.end_lineno - n.lineno + 1, type(n).__name__, n.name) for n in ast.walk(tree)
         if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
print("largest class: {0} lines ({2}); largest function: {3} lines ({5})".format(
    *max(s for s in sizes if s[1] == "ClassDef"), *max(s for s in sizes if s[1] != "ClassDef")))

compares = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare)
            and any(isinstance(side, ast.Attribute) and side.attr == "type" for side in [n.left, *n.comparators])]
print(f"comparisons with an attribute named type: {len(compares)} (lines {compares}; at most 5)")

private = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name.startswith("_")}
private |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name) and t.id.startswith("_")}
uses = [m.group(1) for m in re.finditer(r"\bme\.(_[a-zA-Z]\w*)", tests) if m.group(1) in private]
print(f"test_mom_events.py: {len(tests.splitlines())} lines (budget 3,500); private names used {len(uses)} "
      f"times (at most 60): {', '.join(sorted(set(uses)))}")
