"""Write the synthetic shapes with known factors (amortized_pyro.runs.shapes) as a .npz file every loader reads:

    python experiments/make_shapes.py --out data/shapes.npz --n-train 4000 --n-test 1000 --seed 0

then e.g. `python -m amortized_pyro fit --dataset data/shapes.npz --n-obs 4000 --n-test 1000 ...`. An existing
file is refused (nothing is overwritten)."""
import argparse
import sys

from amortized_pyro import AmortizedPyroError
from amortized_pyro.runs.shapes import write_shapes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the new .npz file")
    parser.add_argument("--n-train", type=int, default=4000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        path = write_shapes(args.out, args.n_train, args.n_test, args.seed)
    except AmortizedPyroError as error:
        sys.exit("make_shapes.py: %s" % error)
    print("wrote %s: %d training and %d test images, factors shape, scale, x, y" % (path, args.n_train, args.n_test))


if __name__ == "__main__":
    main()
