"""Models the package did not write, for the guide builders' tests: a linear-Gaussian latent model (posterior,
log p(x) and the best mean-field ELBO in closed form) in three plate styles, the same with global latents,
a standard VAE written as Pyro's examples/vae writes it (a ``pyro.module`` decoder, no prior on its weights),
Pyro's sparse gamma deep exponential family (Gamma locals, Poisson counts), and a scANVI-style count model with
two local sites (library sizes over two orders of magnitude)."""
import math

import torch
from torch import nn

import pyro
import pyro.distributions as dist


class LinearGaussian:
    """z_n ~ N(0, I_dz), x_n ~ N(W z_n + b, σ² I_dx): fixed W, b, σ (no global latent)."""

    def __init__(self, n, dx, dz, sigma, correlation=0.9, seed=0):
        generator = torch.Generator().manual_seed(seed)
        base = torch.randn(dx, 1, generator=generator)
        # columns of W nearly parallel: the posterior of z_n is correlated, so mean-field has a real gap
        self.W = correlation * base + math.sqrt(1 - correlation ** 2) * torch.randn(dx, dz, generator=generator)
        self.b = torch.randn(dx, generator=generator)
        self.sigma, self.dz = sigma, dz
        self.x = torch.randn(n, dz, generator=generator) @ self.W.T + self.b + sigma * torch.randn(n, dx, generator=generator)

    def local(self, x):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([self.dz]).to_event(1))
        pyro.sample("x", dist.Normal(z @ self.W.T + self.b, self.sigma).to_event(1), obs=x)

    def model(self, x):
        """The plain plate: pyro.plate("data", len(x))."""
        with pyro.plate("data", len(x)):
            self.local(x)

    def subsampled(self, x_batch, idx):
        """A minibatch x_batch with its indices among the N datapoints: pyro.plate("data", N, subsample=idx)."""
        with pyro.plate("data", len(self.x), subsample=idx):
            self.local(x_batch)

    def random_batches(self, x, batch):
        """All N datapoints given, the plate draws the batch: pyro.plate("data", N, subsample_size=batch)."""
        with pyro.plate("data", len(x), subsample_size=batch) as idx:
            self.local(x[idx])

    def at(self, W, sigma):
        """The same model with W and σ replaced (the closed forms at a global draw θ = (W, σ))."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__, W=W, sigma=sigma)
        return other

    # closed forms
    def precision(self):
        """Λ = I + Wᵀ W / σ², the posterior precision of every z_n."""
        return torch.eye(self.dz, dtype=self.W.dtype) + self.W.T @ self.W / self.sigma ** 2

    def posterior_mean(self, x):
        return torch.linalg.solve(self.precision(), self.W.T @ (x - self.b).T / self.sigma ** 2).T

    def log_px(self, x):
        cov = self.W @ self.W.T + self.sigma ** 2 * torch.eye(len(self.b), dtype=self.W.dtype)
        return dist.MultivariateNormal(self.b, cov).log_prob(x)

    def elbo(self, x, loc, scale):
        """The ELBO of the factor N(loc, diag scale²) per datapoint, exactly."""
        mean = loc @ self.W.T + self.b
        spread = (scale.pow(2) @ self.W.pow(2).T)  # E_q ‖W(z − loc)‖² per output coordinate
        likelihood = dist.Normal(mean, self.sigma).log_prob(x).sum(-1) - spread.sum(-1) / (2 * self.sigma ** 2)
        prior = -0.5 * (loc.pow(2) + scale.pow(2)).sum(-1) - self.dz / 2 * math.log(2 * math.pi)
        entropy = scale.log().sum(-1) + self.dz / 2 * (1 + math.log(2 * math.pi))
        return likelihood + prior + entropy

    def best_scale(self):
        """The best mean-field factor's scales: 1/√Λ_ii (its locs: the posterior mean)."""
        return self.precision().diagonal().rsqrt()

    def approximation_gap(self):
        """log p(x_n) − the best mean-field ELBO = ½ (Σ log Λ_ii − log det Λ), the same for every n."""
        precision = self.precision()
        return 0.5 * (precision.diagonal().log().sum() - torch.logdet(precision))


class WithGlobals(LinearGaussian):
    """The same, with a global latent: W ~ N(0, 1) per entry and σ ~ LogNormal(−1, 0.3)."""

    def model(self, x):
        W = pyro.sample("W", dist.Normal(torch.zeros_like(self.W), 1.0).to_event(2))
        sigma = pyro.sample("sigma", dist.LogNormal(-1.0, 0.3))
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([self.dz]).to_event(1))
            mean = (z.unsqueeze(-2) @ W.transpose(-1, -2)).squeeze(-2) + self.b
            pyro.sample("x", dist.Normal(mean, sigma.unsqueeze(-1)).to_event(1), obs=x)  # σ: [] or [P, 1]


class VAE(nn.Module):
    """A standard VAE as Pyro's examples/vae writes it: z ~ N(0, I), x ~ Bernoulli(decoder(z)), the decoder's
    weights parameters (``pyro.module``), and its own hand-written encoder guide."""

    def __init__(self, x_dim=12, z_dim=3, hidden=8):
        super().__init__()
        self.z_dim = z_dim
        self.decoder = nn.Sequential(nn.Linear(z_dim, hidden), nn.Softplus(), nn.Linear(hidden, x_dim))
        self.body = nn.Sequential(nn.Linear(x_dim, hidden), nn.Softplus())
        self.loc, self.log_scale = nn.Linear(hidden, z_dim), nn.Linear(hidden, z_dim)

    def model(self, x):
        pyro.module("decoder", self.decoder)
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("latent", dist.Normal(x.new_zeros(self.z_dim), 1.0).to_event(1))
            pyro.sample("obs", dist.Bernoulli(logits=self.decoder(z)).to_event(1), obs=x)

    def guide(self, x):
        """The hand-written encoder guide (examples/vae's, with exp for the scale)."""
        pyro.module("body", self.body)
        pyro.module("loc", self.loc)
        pyro.module("log_scale", self.log_scale)
        with pyro.plate("data", x.shape[0]):
            h = self.body(x)
            pyro.sample("latent", dist.Normal(self.loc(h), self.log_scale(h).exp()).to_event(1))


class SparseGammaDEF:
    """Pyro's examples/sparse_gamma_def.py model at small sizes (``pixels`` per datapoint, layers of widths
    ``top``, ``mid``, ``bottom``): Gamma weights in their own plates, three layers of Gamma locals per
    datapoint, Poisson counts."""

    alpha_z, beta_z, alpha_w, beta_w = 0.1, 0.1, 0.1, 0.3

    def __init__(self, pixels, top=4, mid=3, bottom=2):
        self.pixels, self.top, self.mid, self.bottom = pixels, top, mid, bottom

    def model(self, x):
        with pyro.plate("w_top_plate", self.top * self.mid):
            w_top = pyro.sample("w_top", dist.Gamma(self.alpha_w, self.beta_w))
        with pyro.plate("w_mid_plate", self.mid * self.bottom):
            w_mid = pyro.sample("w_mid", dist.Gamma(self.alpha_w, self.beta_w))
        with pyro.plate("w_bottom_plate", self.bottom * self.pixels):
            w_bottom = pyro.sample("w_bottom", dist.Gamma(self.alpha_w, self.beta_w))
        with pyro.plate("data", x.size(0)):
            z_top = pyro.sample("z_top", dist.Gamma(self.alpha_z, self.beta_z).expand([self.top]).to_event(1))
            w_top = w_top.reshape(w_top.shape[:-1] + (self.top, self.mid))
            mean_mid = torch.matmul(z_top.unsqueeze(-2), w_top).squeeze(-2)
            z_mid = pyro.sample("z_mid", dist.Gamma(self.alpha_z, self.beta_z / mean_mid).to_event(1))
            w_mid = w_mid.reshape(w_mid.shape[:-1] + (self.mid, self.bottom))
            mean_bottom = torch.matmul(z_mid.unsqueeze(-2), w_mid).squeeze(-2)
            z_bottom = pyro.sample("z_bottom", dist.Gamma(self.alpha_z, self.beta_z / mean_bottom).to_event(1))
            w_bottom = w_bottom.reshape(w_bottom.shape[:-1] + (self.bottom, self.pixels))
            mean_obs = torch.matmul(z_bottom.unsqueeze(-2), w_bottom).squeeze(-2)
            pyro.sample("obs", dist.Poisson(mean_obs).to_event(1), obs=x)


class CountModel(nn.Module):
    """A scANVI-style model (Pyro's examples/scanvi, without labels, read and written anew): per cell z_n ~ N(0,
    I_z) and a library size l_n ~ LogNormal(m, s) (``log_library`` = (m, s), the log library sizes' mean and
    spread, as scANVI sets them from the data), counts x_ng ~ GammaPoisson with mean l_n · softmax(decoder(z_n))_g
    and a learned inverse dispersion per gene, in ``pyro.plate("cells", N, subsample_size=batch)``; and the
    hand-written encoder guide of the example's kind (log1p of the counts, softplus scales)."""

    def __init__(self, log_library, genes=50, z_dim=5, hidden=128, batch=100):
        super().__init__()
        self.genes, self.z_dim, self.batch = genes, z_dim, batch
        self.l_loc, self.l_scale = log_library
        self.decoder = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, genes))
        self.encoder = nn.Sequential(nn.Linear(genes, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, 2 * z_dim + 2))

    def model(self, x):
        pyro.module("decoder", self.decoder)
        inverse_dispersion = pyro.param("inverse_dispersion", 10.0 * x.new_ones(self.genes),
                                        constraint=dist.constraints.positive)
        with pyro.plate("cells", len(x), subsample_size=min(self.batch, len(x))) as idx:
            z = pyro.sample("z", dist.Normal(0.0, x.new_ones(self.z_dim)).to_event(1))
            l = pyro.sample("l", dist.LogNormal(self.l_loc, self.l_scale * x.new_ones(1)).to_event(1))
            mean = l * torch.softmax(self.decoder(z), -1)
            pyro.sample("x", dist.GammaPoisson(inverse_dispersion, inverse_dispersion / mean).to_event(1),
                        obs=x[idx])

    def guide(self, x):
        """The hand-written guide: one network of log1p(x) to both sites' factors."""
        pyro.module("encoder", self.encoder)
        with pyro.plate("cells", len(x), subsample_size=min(self.batch, len(x))) as idx:
            loc, scale = self.encoded(x[idx])
            pyro.sample("z", dist.Normal(loc[:, :-1], scale[:, :-1]).to_event(1))
            pyro.sample("l", dist.LogNormal(loc[:, -1:], scale[:, -1:]).to_event(1))

    def encoded(self, x):
        """The hand-written guide's (μ, σ) of (z, log l) for cells x: [B, z_dim + 1] each."""
        out = self.encoder(torch.log1p(x))
        return out[:, :self.z_dim + 1], nn.functional.softplus(out[:, self.z_dim + 1:]) + 1e-4

    @staticmethod
    def simulate(n, seed, genes=50, z_dim=5):
        """(counts [n, genes], library sizes [n]): cells drawn from ``seed`` through a random decoder (seed 1234)
        of the model's form, library sizes log-uniform over 500–20,000, Gamma(5)-Poisson noise."""
        weight = torch.randn(z_dim, genes, generator=torch.Generator().manual_seed(1234))
        g = torch.Generator().manual_seed(seed)
        z = torch.randn(n, z_dim, generator=g)
        library = torch.empty(n).uniform_(math.log(500.0), math.log(20000.0), generator=g).exp()
        rate = library.unsqueeze(-1) * torch.softmax(z @ weight, -1)
        gamma = torch._standard_gamma(torch.full_like(rate, 5.0), generator=g) / 5.0
        return torch.poisson(rate * gamma, generator=g), library

    @classmethod
    def for_data(cls, x, **options):
        """The model with m, s read off the counts ``x``, as scANVI reads them."""
        logs = x.sum(-1).log()
        return cls((float(logs.mean()), float(logs.std())), genes=x.shape[-1], **options)
