"""The figure of drawn images (the ``sample`` command): a grid whose rows are classes (a conditional run) or
independent draws (an unconditional one), each row named at its left, what was drawn said in the title."""
import textwrap

from amortized_pyro.report.style import save_figure, subplots


def sample_figure(images, image_shape, row_names, title, path):
    """Draw ``images`` [R, C, pixels] (numbers in [0, 1], each row of pixels an image of ``image_shape``
    (channels, height, width) flattened channel-first) as R rows of C images, row r named ``row_names[r]``,
    under ``title``, into the PNG ``path``; returns the figure.

    :param images: array-like [R, C, channels·height·width].
    :param tuple image_shape: (channels, height, width).
    :param list row_names: R names, one per row.
    :param str title: what the grid shows (how z was drawn, which θ).
    :param path: the PNG to write.
    """
    rows, cols = len(images), len(images[0])
    channels, height, width = image_shape
    fig, axes = subplots(rows, cols, figsize=(0.9 * cols + 1.0, 0.9 * rows + 0.9), squeeze=False)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            image = images[r][c].reshape(channels, height, width).clip(0, 1)
            if channels == 1:
                ax.imshow(image[0], cmap="gray", vmin=0, vmax=1)
            else:  # channel-first rows, drawn as height × width × colour
                ax.imshow(image.transpose(1, 2, 0))
        axes[r][0].set_ylabel(row_names[r], fontsize=8, rotation=0, ha="right", va="center")
    # wrapped to the grid's width (about 14 characters of 8-point text per inch): a long title is not cut at the edges
    fig.suptitle(textwrap.fill(title, max(30, int(14 * (0.9 * cols + 1.0)))), fontsize=8)
    return save_figure(fig, path)
