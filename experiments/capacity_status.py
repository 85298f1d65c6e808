"""Where a capacity sweep stands: the table and figure of the encoders finished so far in a capacity.jsonl
(the capacity command writes them only once the whole sweep is done).

    python experiments/capacity_status.py runs/capacity/capacity.jsonl --out figures/capacity
"""
import argparse
import json
import shutil
from pathlib import Path

from amortized_pyro.report.gap_figures import capacity_figure
from amortized_pyro.report.tables import format_capacity


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if Path(args.rows).resolve() != (out / "capacity.jsonl").resolve():  # made again in place: nothing to copy
        shutil.copy(args.rows, out / "capacity.jsonl")
    table = format_capacity(rows)
    (out / "capacity.md").write_text("Command: python experiments/capacity_status.py %s --out %s (%d encoders)\n\n%s\n"
                                     % (args.rows, args.out, len(rows) // 2, table))
    capacity_figure(rows, out / "capacity.png")
    print(table)


if __name__ == "__main__":
    main()
