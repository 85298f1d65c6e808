"""Cut the MNIST sample shipped in ``amortized_pyro/sample`` from the real MNIST test set.

    python scripts/make_mnist_sample.py ../shared/data/mnist --n 3000

Takes the first ``--n`` images (and labels) of ``t10k-images-idx3-ubyte.gz`` in their published order,
so anyone holding the published file can re-create the sample byte for byte.
"""
import argparse
from pathlib import Path

import numpy as np

from amortized_pyro.runs.formats import read_idx

OUT = Path(__file__).resolve().parents[1] / "amortized_pyro" / "sample" / "mnist_sample.npz"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mnist_dir", type=Path, help="folder holding t10k-images-idx3-ubyte(.gz)")
    parser.add_argument("--n", type=int, default=3000, help="number of images to keep")
    args = parser.parse_args()
    images = read_idx(next(args.mnist_dir.glob("t10k-images-idx3-ubyte*")))[: args.n]
    labels = read_idx(next(args.mnist_dir.glob("t10k-labels-idx1-ubyte*")))[: args.n]
    np.savez_compressed(OUT, images=images, labels=labels,
                        source=np.array("MNIST t10k-images-idx3-ubyte, first %d images" % args.n))
    print("wrote %s: %s images" % (OUT, images.shape))


if __name__ == "__main__":
    main()
