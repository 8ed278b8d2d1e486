"""The house in numbers: lines per floor, long modules and functions, untyped dicts.

Also the file names used twice and the import contracts. Usage: ``python
scripts/house.py [--json]`` from the repository root. It reads ``fronde/`` (the product)
with :mod:`ast`, and runs ``lint-imports`` for the contracts when it is on PATH.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_MAX_LINES = 400
FUNCTION_MAX_LINES = 80


def measure(package: Path) -> dict[str, object]:
    """Lines per package, big modules and functions, ``dict[str, Any]`` count, twin names."""
    per_package: Counter[str] = Counter()
    big_modules: list[tuple[str, int]] = []
    big_functions: list[tuple[str, int]] = []
    names: defaultdict[str, list[str]] = defaultdict(list)
    untyped = 0
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        parts = path.relative_to(package).parts
        per_package[parts[0] if len(parts) > 1 else "(top)"] += lines
        if lines > MODULE_MAX_LINES:
            big_modules.append((rel, lines))
        if path.name != "__init__.py":
            names[path.name].append(rel)
        untyped += text.count("dict[str, Any]")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > FUNCTION_MAX_LINES:
                    big_functions.append((f"{rel}:{node.name}", n))
    return {
        "lines_per_package": dict(per_package.most_common()),
        "lines_total": sum(per_package.values()),
        "modules_over_400": big_modules,
        "functions_over_80": big_functions,
        "dict_str_any": untyped,
        "file_names_used_twice": {k: v for k, v in names.items() if len(v) > 1},
    }


def contracts() -> str:
    """The last line of ``lint-imports`` (kept and broken contracts), or why it did not run."""
    exe = shutil.which("lint-imports")
    if exe is None:
        return "lint-imports not on PATH"
    done = subprocess.run(
        [exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else done.stderr.strip()


def main() -> None:
    """Print the figures (a table, or JSON with ``--json``)."""
    ap = argparse.ArgumentParser(description="the house in numbers")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()
    out = measure(ROOT / "fronde") | {"contracts": contracts()}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"fronde/: {out['lines_total']} lines")
    for pkg, n in out["lines_per_package"].items():  # type: ignore[union-attr]
        print(f"  {pkg:<12} {n:>6}")
    for key in ("modules_over_400", "functions_over_80"):
        rows = out[key]
        print(f"{key}: {len(rows)}")  # type: ignore[arg-type]
        for name, n in rows:  # type: ignore[union-attr]
            print(f"  {n:>5}  {name}")
    print(f"dict[str, Any]: {out['dict_str_any']}")
    print(f"file names used twice: {out['file_names_used_twice']}")
    print(f"import contracts: {out['contracts']}")


if __name__ == "__main__":
    main()
