"""The figure of drawn images (the ``sample`` command): a grid whose rows are classes (a conditional run) or
independent draws (an unconditional one), each row named at its left, what was drawn said in the title.

The grid is one image (a mosaic), not an axes per drawn image: 100 × 100 axes took 6.4 minutes and 4 GB to draw
and held a Ctrl-C for half a minute (issue 71); the mosaic draws in seconds at the command's ceiling."""
import textwrap

import numpy as np

from amortized_pyro.report.style import save_figure, subplots

DPI = 110  # save_figure's
GAP = 1  # pixels of white between images


def mosaic(images, image_shape, gap=GAP):
    """``images`` [R, C, channels·height·width] as one array [R·(height+gap)−gap, C·(width+gap)−gap, channels],
    image (r, c) at rows r·(height+gap) and columns c·(width+gap), white lines ``gap`` pixels wide between them."""
    images = np.asarray(images, dtype=np.float32)
    rows, cols = images.shape[:2]
    channels, height, width = image_shape
    tiles = images.reshape(rows, cols, channels, height, width).clip(0, 1).transpose(0, 3, 1, 4, 2)
    padded = np.ones((rows, height + gap, cols, width + gap, channels), dtype=np.float32)
    padded[:, :height, :, :width] = tiles
    return padded.reshape(rows * (height + gap), cols * (width + gap), channels)[:-gap or None, :-gap or None]


def sample_figure(images, image_shape, row_names, title, path):
    """Draw ``images`` [R, C, pixels] (numbers in [0, 1], each row of pixels an image of ``image_shape``
    (channels, height, width) flattened channel-first) as R rows of C images, row r named ``row_names[r]``,
    under ``title``, into the PNG ``path``; returns the figure (one axes, the grid one image of it: :func:`mosaic`).

    :param images: array-like [R, C, channels·height·width].
    :param tuple image_shape: (channels, height, width).
    :param list row_names: R names, one per row.
    :param str title: what the grid shows (how z was drawn, which θ).
    :param path: the PNG to write.
    """
    grid = mosaic(images, image_shape)
    rows, cols = len(images), len(images[0])
    _, height, width = image_shape
    # 0.9 inch an image up to a grid of about 24 inches, then smaller, but never below the images' own pixels
    cell = max(min(0.9, 24.0 / max(rows, cols)), (max(height, width) + GAP) / DPI)
    fig, ax = subplots(figsize=(cell * cols + 1.0, cell * rows + 0.9))
    if grid.shape[2] == 1:
        ax.imshow(grid[:, :, 0], cmap="gray", vmin=0, vmax=1)
    else:
        ax.imshow(grid)
    ax.set_xticks([])
    ax.set_yticks([r * (height + GAP) + (height - 1) / 2 for r in range(rows)], row_names, fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    # wrapped to the grid's width (about 14 characters of 8-point text per inch): a long title is not cut at the edges
    fig.suptitle(textwrap.fill(title, max(30, int(14 * (cell * cols + 1.0)))), fontsize=8)
    return save_figure(fig, path)
