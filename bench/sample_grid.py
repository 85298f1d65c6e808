"""How long ``sample``'s largest grid takes to draw and save (issue 71: one axes per image took 6.4 minutes and 4 GB
for 100 × 100 images; the grid is now one image, :func:`amortized_pyro.report.samples.sample_figure`): MAX_GRID rows
of MAX_GRID random 28 × 28 images (random pixels: the worst case for the PNG), drawn and written --repeats times;
prints the seconds of each and the PNG's size.

    python bench/sample_grid.py --repeats 3
"""
import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from matplotlib.image import imread

from amortized_pyro.cli.commands import MAX_GRID
from amortized_pyro.report.samples import sample_figure


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    images = np.random.default_rng(0).random((MAX_GRID, MAX_GRID, 784), dtype=np.float32)
    names = ["draws %d" % r for r in range(MAX_GRID)]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "grid.png"
        for _ in range(args.repeats):
            began = time.perf_counter()
            sample_figure(images, (1, 28, 28), names, "the largest grid", out)
            seconds = time.perf_counter() - began
            height, width = imread(out).shape[:2]
            print("%d × %d images: %.1f s, a PNG of %d × %d pixels, %.1f MB"
                  % (MAX_GRID, MAX_GRID, seconds, width, height, out.stat().st_size / 1e6))


if __name__ == "__main__":
    main()
