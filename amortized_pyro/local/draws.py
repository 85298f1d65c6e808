"""The gap's global draws θ_1..θ_M, stacked, each with its own random key (NumPyro-style explicit keys).

Every Monte Carlo draw made at θ_m (the z draws of an optimization step, of a local-ELBO estimate, of
IWAE, of AIS) comes from a generator seeded by θ_m's key and the phase it serves. So the estimates at θ_m
do not depend on which other draws are computed with it: batching all M draws into one program, or taking
them one at a time (``chunk``), gives the same numbers, and no phase's draws depend on how many another
phase made.
"""
import torch

PHASES = ("fit", "fit-per-draw", "score", "iwae", "ais", "guide", "refine", "select")  # select: the flow q*'s choice
_GOLDEN = 0x9E3779B97F4A7C15  # spreads (key, phase) over the seeds' range


def keys(generator, count):
    """``count`` random keys (non-negative 62-bit integers) drawn from ``generator``."""
    return torch.randint(2 ** 62, (count,), generator=generator, device=generator.device).tolist()


def stack(values):
    """Global values {site: tensor} of several draws stacked into {site: [M, *shape]}."""
    return {name: torch.stack([one[name] for one in values]) for name in (values[0] if values else {})}


class Draws:
    """M global values stacked (``values``: site → [M, *shape]; {} for a model without global sites) and one
    key per draw, and the phase (one of PHASES) whose z draws they serve. ``len()`` is M; :meth:`part` a
    contiguous subset; :meth:`at` the same draws for another phase; :meth:`generators` the draws' generators;
    :meth:`normal` and :meth:`uniform` stack a draw from each given generator, as [M, *shape]. ``per_image``:
    the sites whose values hold one row per image after the draws ([M, n, ...]: terms precomputed for the
    images measured), which :meth:`images` subsets."""

    def __init__(self, values, keys, device, phase="fit", per_image=()):
        if phase not in PHASES:
            raise ValueError("phase %r is not one of %s" % (phase, ", ".join(PHASES)))
        self.values, self.keys, self.device, self.phase = values, list(keys), torch.device(device), phase
        self.per_image = tuple(per_image)

    @classmethod
    def of(cls, values, generator):
        """Draws of the list ``values`` (site → tensor each), keyed from ``generator``."""
        return cls(stack(values), keys(generator, len(values)), generator.device)

    def at(self, phase):
        return Draws(self.values, self.keys, self.device, phase, self.per_image)

    def with_values(self, values, per_image=()):
        """The same draws and keys with ``values`` (e.g. with terms precomputed from them; ``per_image``: those
        with one row per image)."""
        return Draws(values, self.keys, self.device, self.phase, per_image)

    def images(self, idx):
        """The same draws with the per-image values of the images ``idx`` alone."""
        values = {k: v[:, idx] if k in self.per_image else v for k, v in self.values.items()}
        return Draws(values, self.keys, self.device, self.phase, self.per_image)

    def __len__(self):
        return len(self.keys)

    def part(self, start, stop):
        return Draws({k: v[start:stop] for k, v in self.values.items()}, self.keys[start:stop], self.device,
                     self.phase, self.per_image)

    def one(self, m):
        """θ_m as site → tensor."""
        return {k: v[m] for k, v in self.values.items()}

    def detached(self):
        return Draws({k: v.detach() for k, v in self.values.items()}, self.keys, self.device, self.phase,
                     self.per_image)

    def generators(self):
        """One fresh generator per draw, seeded by the draw's key and the phase."""
        offset = _GOLDEN * (1 + PHASES.index(self.phase))
        return [torch.Generator(self.device).manual_seed((key + offset) % 2 ** 63) for key in self.keys]

    def normal(self, generators, shape, dtype=None):
        """Standard normal draws [len(generators), *shape], one slice from each generator."""
        return torch.stack([torch.randn(shape, generator=g, device=self.device, dtype=dtype) for g in generators])

    def uniform(self, generators, shape, dtype=None):
        return torch.stack([torch.rand(shape, generator=g, device=self.device, dtype=dtype) for g in generators])

    def chunks(self, per_draw, budget):
        """(start, stop) spans of draws holding at most ``budget`` rows when each draw holds ``per_draw``
        (at least one draw per span)."""
        size = max(1, budget // max(per_draw, 1))
        return [(start, min(start + size, len(self))) for start in range(0, len(self), size)]
