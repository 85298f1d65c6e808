"""What defines a run: :class:`FitConfig`, its checks, and study presets in TOML.

Every field carries its help text and its range or choices (:func:`amortized_pyro.settings.option`); the
command line's options are generated from them (:mod:`amortized_pyro.cli.options`), and :meth:`FitConfig.check`
applies the same rules to configurations made in Python. A preset is a TOML file whose top-level keys are
FitConfig fields (dashes or underscores) and whose optional ``[compare]`` table holds a comparison's grid
(``guides``, ``widths``, ``seeds``, ``datasets``, ``data_seed``, ``study``, ``plateau_fraction``)::

    likelihood = "normal"
    obs_scale = 0.1
    epochs = 300
    [compare]
    widths = [1, 64, 128, 256]
"""
import math
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path

from amortized_pyro.errors import AmortizedPyroError, InvalidSettings
from amortized_pyro.inference.svi import ESTIMATORS
from amortized_pyro.models.conditional import CLASS_PRIORS, DECODER_LABELS
from amortized_pyro.models.decoder import DECODER_PRIORS, LIKELIHOODS, LOCAL_TERMS
from amortized_pyro.models.networks import DECODERS
from amortized_pyro.models.guide_options import RULES
from amortized_pyro.models.guides import ENCODER_GUIDES, GUIDES
from amortized_pyro.models.q_theta import THETA_INIT_SCALE
from amortized_pyro.settings import Checked, field_error, setting

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

BATCH_ORDERS = ("shuffled", "blocks")
FREE_GUIDES = tuple(g for g in GUIDES if g not in ENCODER_GUIDES)  # per-datapoint and shared: free factors
# The fields that configure some guides only, and the guides each configures (its help says so): given for
# another guide, such an option would do nothing and still be recorded, so the command line refuses it
GUIDE_SETTINGS = {**dict.fromkeys(("width", "encoder", "encoder_layers", "encoder_slope", "encoder_label"),
                                  ENCODER_GUIDES),
                  **dict.fromkeys(("refine_steps", "refine_lr", "refine_grad", "refine_optimizer", "refine_share",
                                   "refine_score"),
                                  ("semi-amortized",)),
                  "iterations": ("iterative",), "qz_init": FREE_GUIDES,
                  "flow": tuple(g for g in GUIDES if g not in ("semi-amortized", "iterative"))}
COMPARE_KEYS = ("guides", "widths", "seeds", "datasets", "data_seed", "study", "plateau_fraction")


def parse_device(text):
    """auto, cpu, cuda or cuda:N"""
    kind, _, index = str(text).partition(":")
    if text in ("auto", "cpu", "cuda") or (kind == "cuda" and index.isdigit()):
        return text
    raise ValueError(text)


def parse_every(text):
    """a training time (30s, 5m, 2h) or a number of epochs (10)

    Returns ("seconds", 60.0) for "60s", ("epochs", 10) for "10"."""
    text = str(text).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600}
    if text and text[-1] in units:
        seconds = float(text[:-1]) * units[text[-1]]
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(text)
        return "seconds", seconds
    epochs = int(text)
    if epochs < 1:
        raise ValueError(text)
    return "epochs", epochs


@dataclass
class FitConfig(Checked):
    """Everything that defines a run; each field is one command-line option (``n_obs`` → ``--n-obs``)."""

    guide: str = setting("amortized", "Family of q(z_n): amortized (encoder, A-VI), semi-amortized (encoder, then "
                         "--refine-steps of Adam per minibatch, SA-VI), iterative (encoder, then --iterations updates "
                         "by a network of the local ELBO's gradient, IA-VI: Marino et al. 2018), per-datapoint (F-VI) "
                         "or shared (constant-VI).",
                         choices=GUIDES, grid=True)
    width: int = setting(128, "Encoder width k of the encoder guides (amortized, semi-amortized, iterative).",
                         grid=True, **RULES["width"])
    encoder_layers: int = setting(2, "Hidden layers of the encoder (1 in the reference study's code, 2 in its "
                                 "authors' original).", **RULES["encoder_layers"])
    encoder_slope: float = setting(0.2, "Negative slope of the encoder's LeakyReLU (0.04 reproduces the tutorial's "
                                  "one-hidden-layer encoder, which applies LeakyReLU(0.2) twice).", **RULES["encoder_slope"])
    refine_steps: int = setting(5, "SA-VI: steps refining the encoder's factor on the local ELBO, per "
                               "minibatch (0: A-VI exactly).", **RULES["refine_steps"])
    refine_lr: float = setting(1e-2, "SA-VI: learning rate of the refinement steps.", **RULES["refine_lr"])
    refine_grad: str = setting("straight-through", "SA-VI: how the encoder's gradient passes the refinement: "
                              "straight-through (the refined factor's gradient applied to the encoder's output) or "
                              "unrolled (through every step, as Kim et al. 2018).", **RULES["refine_grad"])
    refine_optimizer: str = setting("adam", "SA-VI: the refinement's optimizer: adam, or sgd-momentum (Kim et al. "
                                    "2018's inner loop: momentum 0.5, each image's gradient clipped to norm 5; "
                                    "its learning rate --refine-lr, chosen by bench/archive/refine_sweep.py).", **RULES["refine_optimizer"])
    refine_share: float = setting(1.0, "SA-VI: refine only this share of each minibatch's images, those with the "
                                  "highest --refine-score (1: all; the others keep the encoder's factor).", **RULES["refine_share"])
    refine_score: str = setting("spread", "SA-VI with --refine-share below 1: which images count as worst: spread "
                                "(of 8 log importance weights), khat (their Pareto k̂) or elbo (the lowest local "
                                "ELBO).", **RULES["refine_score"])
    flow: int = setting(0, "Normalizing-flow transforms K after q(z_n)'s Gaussian factor (masked autoregressive, "
                       "through Zuko; conditioned on the encoder's features for A-VI, unconditional for F-VI and "
                       "constant-VI; they start as the identity); 0: Gaussian.", **RULES["flow"])
    iterations: int = setting(5, "Iterative: updates T of the encoder's factor by the update network, each "
                             "iteration's local ELBO trained (0: A-VI exactly).", **RULES["iterations"])
    seed: int = setting(0, "Seeds data subsets, binarization, initialisation and sampling.",
                       grid=True, **RULES["seed"])
    dataset: str = setting("mnist", "mnist, fashion-mnist, cifar10, svhn, mnist-sample (shipped, offline), a "
                          "folder of IDX files, of CIFAR-10's python batches (cifar-10-batches-py) or of SVHN's "
                          "train_32x32.mat / test_32x32.mat, or a .npy/.npz file of images.", grid=True)
    data_dir: str = setting("data", "Where torchvision finds or downloads mnist, fashion-mnist, cifar10, svhn.",
                           result=False)
    download: bool = setting(True, "Try to download a named dataset when it is not in --data-dir.",
                            result=False)
    grayscale: bool = setting(False, "Colour images (CIFAR-10, SVHN) as their luminance, 0.299 R + 0.587 G + "
                             "0.114 B, one channel; colour is kept otherwise (3 × 32 × 32 = 3,072 pixels).")
    n_obs: int = setting(10000, "Training images N (a deterministic subset chosen by the seed).", low=1)
    n_test: int = setting(1000, "Held-out test images.", low=0)
    binarize: bool = setting(False, "Binarize the images once, x ~ Bernoulli(pixel), deterministically from "
                            "the seed (for the Bernoulli likelihood).")
    likelihood: str = setting("normal", "p(x | z, θ): normal, N(Ω(z; θ), obs-scale² I), or bernoulli, "
                             "Bernoulli(sigmoid(Ω(z; θ))) on binary images.", choices=LIKELIHOODS)
    obs_scale: float = setting(1.0, "Likelihood std of every pixel (normal likelihood); the studies' code "
                              "uses 1/sqrt(2).", low=0, open_low=True)
    prior_scale: float = setting(1.0, "Prior std of every decoder weight; the authors' original uses 1/sqrt(2).",
                                low=0, open_low=True)
    decoder: str = setting("mlp", "The decoder Ω(z; θ), every weight and bias a latent site: mlp (z → H → H → "
                          "pixels) or conv (a linear layer to H/4 channels on a quarter-size grid, then two "
                          "transposed convolutions, kernel 4, stride 2, through H/8 channels to the image; "
                          "height and width multiples of 4).", choices=tuple(DECODERS))
    encoder: str = setting("mlp", "The encoder's body (A-VI, SA-VI): mlp (the flattened image through "
                          "--encoder-layers layers of width k) or conv (two convolutions, 32 and 64 channels, "
                          "kernel 4, stride 2, then --encoder-layers layers of width k).", **RULES["encoder"])
    decoder_prior: str = setting("normal", "normal: Normal(0, prior-scale²) on every decoder weight and bias, q(θ) "
                                "mean-field (the Bayesian decoder). none: θ point-estimated with no prior, q(θ) "
                                "a point mass started at torch's Linear initialisation (a standard VAE, as Cremer et "
                                "al. 2018 and Pyro's examples/vae): the gap then has no coupling term.",
                                choices=DECODER_PRIORS)
    conditional: bool = setting(False, "A conditional VAE (Sohn et al. 2015) on the images' class labels: the "
                               "decoder reads [z, one-hot(c)], the encoder guides' encoder [x, one-hot(c)] (F-VI and "
                               "constant-VI unchanged), p(z | c) as --class-prior says; needs a dataset with labels.")
    class_prior: str = setting("standard", "p(z | c) of a conditional model: standard, N(0, I) (Sohn et al.'s "
                               "baseline), or learned, N(μ_c, diag σ_c²) with per-class means and log-scales a global "
                               "site (Bayesian as the decoder: a Normal prior and mean-field q; point estimates with "
                               "--decoder-prior none).", choices=CLASS_PRIORS)
    encoder_label: bool = setting(True, "A conditional model's encoder reads the label, q(z | x, c) (Sohn et al.); "
                                  "--no-encoder-label: q(z | x), the image alone.", **RULES["encoder_label"])
    decoder_label: str = setting("input", "Where a conditional model's decoder reads the label: input, [z, "
                                 "one-hot(c)] (Sohn et al.), or every-layer, each hidden layer's output [h, "
                                 "one-hot(c)] too (the mlp decoder).", choices=DECODER_LABELS)
    z_dim: int = setting(64, "Latent dimension.", low=1)
    hidden: int = setting(256, "Decoder hidden width H.", low=1)
    init_scale: float = setting(THETA_INIT_SCALE, "Initial std of q(θ) (e^-2 in the studies' code).", **RULES["init_scale"])
    qz_init: str = setting("prior", "Start of the per-datapoint and shared q(z): prior (μ 0, σ 1) or random "
                          "(the studies' code: μ ~ N(0,1), log σ ~ N(0,1) − 1 per datapoint; μ, log σ ~ "
                          "N(0,1) shared).", **RULES["qz_init"])
    epochs: int = setting(5000, "Passes over the N training images.", low=1)
    batch_size: int = setting(1000, "Minibatch size B; local ELBO terms are scaled by N/B. B >= N trains on "
                             "the full batch.", low=1)
    lr: float = setting(1e-3, "Adam learning rate.", low=0, open_low=True)
    beta1: float = setting(0.9, "Adam's first-moment decay β1.", low=0, high=1, open_high=True)
    beta2: float = setting(0.999, "Adam's second-moment decay β2 (0.99 in the reference study's code).",
                          low=0, high=1, open_high=True)
    weight_decay: float = setting(0.0, "AdamW's decoupled weight decay, applied to q(z)'s matrices only (the "
                                 "encoder's weight matrices, the per-datapoint table), never to q(θ); 0 = Adam.",
                                 low=0)
    objective: str = setting("elbo", "elbo: train on the ELBO. reference: the studies' objective, which is NOT an "
                            "ELBO: their log q takes variances and is given standard deviations, so every "
                            "coordinate of q(θ) and q(z) is scored as N(m, s) with variance s (not s²), −log q = "
                            "½ log s + ½ s ε² + const; this weakens the entropy's push on log s (½ + s/2 instead "
                            "of 1) and shrinks q. Draws are unchanged; the true ELBO is still recorded.", **RULES["objective"])
    local_terms: str = setting("minibatch", "minibatch: the z terms log p(z_n) − log q(z_n) of the minibatch, "
                              "scaled by N/B (an unbiased ELBO estimate). all: those of all N images at every "
                              "step, unscaled, as the authors' code (the likelihood stays the minibatch's, "
                              "scaled by N/B).", choices=LOCAL_TERMS)
    batch_order: str = setting("shuffled", "shuffled: a fresh random order of the images every epoch. blocks: "
                              "fixed consecutive blocks of the data, in order, every epoch (the authors' code).",
                              choices=BATCH_ORDERS)
    estimator: str = setting("trace", "The ELBO estimator: trace (Trace_ELBO: log p − log q at the draw) or meanfield "
                            "(TraceMeanField_ELBO: the likelihood at the draw minus the analytic KL of every "
                            "Normal site; the same expectation, less variance; only with --objective elbo).",
                            choices=ESTIMATORS)
    particles: int = setting(1, "Vectorized samples per ELBO estimate.", low=1)
    stop_window: int = setting(0, "Stop early when the training objective per image, averaged over windows of this "
                              "many epochs, rose by less than --stop-gain on the window before (--epochs is then a "
                              "cap; the same rule for every N, where fixed epochs are not); 0 = train all --epochs.",
                              low=0)
    stop_gain: float = setting(0.1, "... nats per image (with --stop-window).", low=0)
    kl_weight: float = setting(1.0, "β of a β-VAE: the KL terms of every latent site weighted by β (poutine.scale, "
                              "as the warm-up); β ≠ 1 trains on that objective, which is NOT an ELBO: it is "
                              "recorded as objective, the ELBO beside it at every evaluation.", low=0,
                              open_low=True)
    kl_warmup: int = setting(0, "KL warm-up: the KL terms are scaled by min(1, epoch / this) over the first "
                            "epochs (poutine.scale); 0 = none. The recorded ELBO is missing until the scale is 1.",
                            low=0)
    device: str = setting("auto", "auto (CUDA when available), cpu, cuda or cuda:N.", parse=parse_device)
    graph: bool = setting(False, "Capture each batch shape's SVI step in a CUDA graph after 3 eager steps and "
                          "replay it (Python skipped; CUDA only; draws from the graph-safe stream).")
    eval_every: int = setting(100, "Evaluate the reconstruction MSEs every this many epochs (and at the end). An "
                             "evaluation (16 predictive draws on train and test) costs about 4 epochs of training "
                             "at the default size on a CPU; every 100 keeps it near 4% of the run (BENCHMARKS.md).",
                             low=1)
    predictive_draws: int = setting(16, "Monte Carlo draws of (θ, z) for the posterior-predictive MSE; 0 = "
                                   "plug-in MSE only.", low=0)
    checkpoint_every: str = setting("60s", "Checkpoint (parameters, optimizer, random states, metrics) every this "
                                   "much training time (30s, 5m, 1h) or every this many epochs (10); also at the "
                                   "start, at the end and on SIGINT/SIGTERM.", parse=parse_every, result=False)

    def check(self):
        """Every field within its rules (:meth:`Checked.check`), and the fields that must agree do."""
        super().check()
        if self.estimator == "meanfield" and self.objective != "elbo":
            raise InvalidSettings("the meanfield estimator's analytic KL is the true one: it cannot score q as the "
                                  "reference objective does (use estimator = trace with objective = reference)",
                                  ["estimator", "objective"])
        if self.class_prior != "standard" and not self.conditional:
            raise InvalidSettings("--class-prior %s is the prior p(z | c) of a conditional model: add --conditional"
                                  % self.class_prior, ["class_prior", "conditional"])
        if (not self.encoder_label or self.decoder_label != "input") and not self.conditional:
            raise InvalidSettings("--no-encoder-label and --decoder-label say where a conditional model reads its "
                                  "label: add --conditional", ["encoder_label", "decoder_label", "conditional"])
        if self.decoder_label != "input" and self.decoder != "mlp":
            raise InvalidSettings("--decoder-label %s is for the mlp decoder" % self.decoder_label,
                                  ["decoder_label", "decoder"])
        if self.refine_share < 1 and not self.refine_steps or self.refine_score != "spread" and self.refine_share == 1:
            raise InvalidSettings("--refine-share below 1 chooses which images --refine-steps refine (give steps), by "
                                  "--refine-score (which then needs a share below 1)",
                                  ["refine_share", "refine_steps", "refine_score"])
        if self.decoder_prior == "none" and self.estimator == "meanfield":
            raise InvalidSettings("the meanfield estimator's analytic KL has no form for a point-estimated decoder "
                                  "(use estimator = trace with decoder_prior = none)", ["estimator", "decoder_prior"])
        return self

    @classmethod
    def from_toml(cls, path, **overrides):
        """A FitConfig from a preset file's top-level keys, then ``overrides``."""
        settings, _ = read_preset(path)
        return replace(cls(**settings), **overrides).check()


def check_values(name, values):
    """Each of ``values`` checked against FitConfig field ``name``'s rules (the grid's lists); returns them."""
    f = FitConfig.__dataclass_fields__[name]
    for value in values:
        error = field_error(f, value)
        if error:
            raise AmortizedPyroError(error)
    return list(values)


def check_applicable(guides, names, option=lambda name: name):
    """Refuse (:class:`InvalidSettings`) the fields among ``names`` (those given) that configure none of
    ``guides`` (:data:`GUIDE_SETTINGS`); ``option(name)`` spells a field as the message names it."""
    names = [n for n in names if n in GUIDE_SETTINGS and not set(guides) & set(GUIDE_SETTINGS[n])]
    if not names:
        return
    one = len(names) == 1
    where = "; ".join("%s applies to %s only" % (option(n), ", ".join(GUIDE_SETTINGS[n])) for n in names)
    raise InvalidSettings("%s configure%s nothing of the %s guide%s: %s; drop %s" % (
        " and ".join(map(option, names)), "s" if one else "", ", ".join(guides), "s" if len(guides) > 1 else "",
        where, "it" if one else "them"), names)


def check_stop_gain(names, stop_window):
    """Refuse ``stop_gain`` among ``names`` (the settings given) where ``stop_window`` is 0: it tunes the early
    stopping that a window turns on, and alone it would be recorded and do nothing (no window is a clear default)."""
    if "stop_gain" in names and not stop_window:
        raise InvalidSettings("--stop-gain tunes the early stopping that --stop-window W turns on, and there is no "
                              "window (0: train all --epochs): give --stop-window too, or drop --stop-gain",
                              ["stop_gain", "stop_window"])


def defaults():
    return {f.name: f.default for f in fields(FitConfig) if f.default is not MISSING}


def first_difference(recorded, requested):
    """The first FitConfig field (that can change results) whose recorded and requested values differ, as
    "name=recorded, not requested", or None."""
    for f in fields(FitConfig):
        if f.metadata["result"] and recorded.get(f.name, f.default) != requested.get(f.name, f.default):
            return "%s=%r, not %r" % (f.name, recorded.get(f.name, f.default), requested.get(f.name, f.default))
    return None


def read_preset(path):
    """(FitConfig fields, compare settings) from a TOML preset; unknown keys are errors."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise AmortizedPyroError("no config file at %s" % path) from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise AmortizedPyroError("cannot read config file %s: %s" % (path, e)) from None
    table = raw.pop("compare", {})
    if not isinstance(table, dict):
        raise AmortizedPyroError("%s: compare must be a table ([compare]), got %r" % (path, table))
    compare = {k.replace("-", "_"): v for k, v in table.items()}
    settings = {k.replace("-", "_"): v for k, v in raw.items()}
    known = set(defaults())
    unknown = [k for k in settings if k not in known] + [k for k in compare if k not in COMPARE_KEYS]
    if unknown:
        raise AmortizedPyroError("%s: unknown setting(s) %s" % (path, ", ".join(sorted(unknown))))
    for name, value in settings.items():  # the same rules as in Python: no 1.7 epochs, no "0.5" strings
        error = field_error(FitConfig.__dataclass_fields__[name], value)
        if error:
            raise AmortizedPyroError("%s: %s" % (path, error))
    return settings, compare
