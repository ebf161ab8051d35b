"""``alnair-opendata convert SRC... --to DIR``: a recording into the published layout;
``alnair-opendata info [DATASET]``: what a published dataset holds."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from ._errors import OpenDataError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="alnair-opendata", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert", help="recorder output directories into the published layout")
    c.add_argument("sources", nargs="+", help="opendata_record.py --out directories (grid parts)")
    c.add_argument("--to", required=True, help="the dataset directory, e.g. data/open-dataset/h200")
    i = sub.add_parser("info", help="runs per workload and mode of a published dataset")
    i.add_argument("dataset", nargs="?", default="h200")
    i.add_argument("--root", default=None)
    a = p.parse_args(argv)
    try:
        if a.command == "convert":
            from ._convert import convert

            done = convert(list(a.sources), a.to)
            print(f"{a.to}: {done['runs']} runs, {done['samples']} samples, {done['summary_columns']} summary "
                  f"columns, {done['bytes'] / 1024:.0f} KiB")
        else:
            from ._loader import load_runs

            runs = load_runs(a.dataset, a.root)
            kinds = Counter(zip(runs["workload"].to_pylist(), runs["mode"].to_pylist(), strict=True))
            print(f"{a.dataset}: {runs.num_rows} runs, {runs.num_columns} columns")
            for (workload, mode), n in sorted(kinds.items()):
                print(f"  {workload:16} {mode:7} {n}")
    except OpenDataError as e:
        print(f"alnair-opendata: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
