"""The held-out study's table and figures made again from its committed rows (held_out.jsonl and references.jsonl
that ``python -m amortized_pyro held-out`` writes), so that figures/held-out/held_out.md can be checked against
them once runs/ is gone (issue 49, item 6).

    python experiments/held_out_report.py figures/held-out --out figures/held-out
"""
import argparse
from pathlib import Path

from amortized_pyro.report.held_out import format_held_out, held_out_figures
from amortized_pyro.support.jsonio import read_jsonl


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder holding held_out.jsonl and references.jsonl")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    folder, out = Path(args.folder), Path(args.out)
    missing = [name for name in ("held_out.jsonl", "references.jsonl") if not (folder / name).is_file()]
    if missing:
        raise SystemExit("held_out_report.py: %s has no %s (the held-out command writes them)"
                         % (folder, " or ".join(missing)))
    rows, references = read_jsonl(folder / "held_out.jsonl"), read_jsonl(folder / "references.jsonl")
    out.mkdir(parents=True, exist_ok=True)
    table = format_held_out(rows, references)
    (out / "held_out.md").write_text("Command: python experiments/held_out_report.py %s --out %s\n\n%s\n"
                                     % (args.folder, args.out, table))
    held_out_figures(rows, references, out)
    print(table)


if __name__ == "__main__":
    main()
