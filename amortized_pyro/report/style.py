"""What every figure shares: figures made outside pyplot (no backend chosen, no global figure registry: a
figure is written by its own Agg canvas), a colour per configuration, legends beside the axes, saving."""
import matplotlib
from matplotlib.figure import Figure

from amortized_pyro.models.guides import FAMILIES

COLORMAPS = ("viridis", "plasma", "cividis")  # one per encoder family (A-VI, SA-VI, IA-VI), widths along it
FAMILY_COLORS = {"amortized": "tab:blue", "semi-amortized": "tab:purple", "iterative": "tab:green",
                 "per-datapoint": "tab:red", "shared": "tab:gray"}  # a family's own colour


def configuration_colors(names):
    """Each encoder family's widths along a colormap of its own (A-VI viridis, SA-VI plasma, IA-VI cividis), the other
    families in their colours (:data:`FAMILY_COLORS`: F-VI red, constant-VI gray), labels with more after
    them (``F-VI, point θ``) too."""
    colors = {f.label: FAMILY_COLORS[f.name] for f in FAMILIES.values() if not f.encoder}
    for name in names:  # a free family's label with more after it (``F-VI, point θ``): its family's colour
        colors.update({name: FAMILY_COLORS[f.name] for f in FAMILIES.values()
                       if not f.encoder and name.startswith(f.label + ",")})
    encoders = [f.label for f in FAMILIES.values() if f.encoder]
    for family, cmap in zip(encoders, COLORMAPS):
        members = [n for n in names if n.startswith(family + " ")]
        colors.update({n: matplotlib.colormaps[cmap](0.15 + 0.7 * i / max(1, len(members) - 1)) for i, n in enumerate(members)})
    return colors


def subplots(nrows=1, ncols=1, figsize=None, **kwargs):
    """A figure and its axes, as ``pyplot.subplots`` gives them, without pyplot."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def legend_outside(ax, fontsize=7):
    """The legend to the right of the axes, never over the curves."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)


def empty_panel(ax, text):
    """A panel with nothing to draw: ``text`` saying why in its middle, and no axes to read values off."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, transform=ax.transAxes)
    ax.set_axis_off()


def save_figure(fig, path):
    """Write ``fig`` to ``path``; returns the figure (its artists stay readable)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig
