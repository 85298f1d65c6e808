"""The amortized families that work on the model's local ELBO inside the guide, built on
:class:`~.families.AutoAmortizedNormal`:

    AutoSemiAmortizedNormal       the amortized factor refined by Adam steps on the local ELBO    SA-VI (Kim et al. 2018)
    AutoIterativeAmortizedNormal  the amortized factor updated by a network of the local ELBO's   iterative amortized
                                  gradient, T times                                               inference (Marino et al.)

and :data:`AUTOGUIDES`, every builder by family name.
"""
import torch

from amortized_pyro.autoguides.factors import REFINE_GRADS, IterativeFactor, SemiAmortizedFactor
from amortized_pyro.autoguides.families import AutoAmortizedNormal, AutoPerDatapointNormal, AutoSharedNormal
from amortized_pyro.autoguides.local_joint import LocalJoint
from amortized_pyro.autoguides.masking import MaskedJoint
from amortized_pyro.autoguides.options import count, positive
from amortized_pyro.errors import AmortizedPyroError, GuideError
from amortized_pyro.local.draws import Draws
from amortized_pyro.local.optimize import REFINE_OPTIMIZERS
from amortized_pyro.local.partial import DEFAULT_DRAWS, check_score
from amortized_pyro.local.steppers import outside_the_trace
from amortized_pyro.support.streams import outside_the_stream

# what torch's argument checks and samplers say of values that are not finite
NOT_FINITE = ("but found invalid values", "probability tensor contains either `inf`, `nan`")


class _OnTheLocalElbo(AutoAmortizedNormal):
    """The amortized families that work on the model's local ELBO inside the guide (SA-VI, iterative), read
    off its trace (:class:`~amortized_pyro.autoguides.local_joint.LocalJoint`) or given.

    :param callable local_log_joint: ``(data, z, θ)`` → log p(x_n, z_n | θ) per datapoint [..., B], for the
        encoder's data [B, ...], local values z [..., B, size] (the flat unconstrained layout) and global
        values θ, written by hand for speed (the package's model has one); None reads it off the model's trace
        (:class:`~amortized_pyro.autoguides.local_joint.LocalJoint`, 1.15–1.75× slower per step: BENCHMARKS.md).

    The other parameters are :class:`AutoAmortizedNormal`'s."""

    def __init__(self, model, *, local_log_joint=None, **kwargs):
        if kwargs.get("flow"):  # their steps and iterations move a Gaussian factor
            raise GuideError("%s takes no flow: its steps work on a Gaussian q(z_n)" % type(self).__name__)
        super().__init__(model, **kwargs)
        self.local_log_joint, self._joint_checked = local_log_joint, False

    def keeps_model(self):
        """Pickled with the model where its local ELBO is read off the model's trace (no ``local_log_joint``)
        or its plate is read off the model."""
        return self.local_log_joint is None or super().keeps_model()

    def factor_with_terms(self, indices, args, kwargs, theta):
        # torch.jit.trace cannot trace the steps' autograd.grad: under it (JitTrace_ELBO) they run as one Python
        # node of the trace, on each call's own tensors (outside_the_trace says why and how)
        try:
            factor = outside_the_trace(self.on_the_local_elbo, indices, args, kwargs, theta)  # a subclass's hook
            self._joint_checked = True
            return factor
        except AmortizedPyroError:  # ours (a GuideError is a ValueError too): as it is
            raise
        except (ValueError, RuntimeError) as error:  # the model's or torch's check of values that are not finite
            text = str(error)
            if not any(sign in text for sign in NOT_FINITE):
                raise
            with torch.no_grad():  # the encoder's own factor: named in one line where it is not finite
                self.check_finite(*self.q_z.encoder(self.encoder_data(indices, args, kwargs)))
            raise GuideError("the %s guide's steps on the local ELBO, from a finite factor of %s, reached values "
                             "the model refuses (%s): try a smaller lr= of the steps, fewer steps or a smaller "
                             "learning rate" % (self.family, ", ".join(repr(s.name) for s in self.structure.locals),
                                                text.splitlines()[0].split(", but found")[0][:160])) from None

    def _joint(self, indices, args, kwargs, theta):
        # at the first call, the model run twice at the same values (a draw its trace does not show, as a site
        # hidden by poutine.block, is refused in one line) and stacked draws checked against one at a time
        joint = self.local_log_joint or LocalJoint(self.model, self.structure, args, kwargs, indices,
                                                   stacked=isinstance(theta, Draws), steady=not self._joint_checked)
        kept = self.coordinate_mask(args, kwargs, len(indices))
        return joint if kept is None else MaskedJoint(joint, kept)

    def particles(self, theta):
        """How many particles the global values carry (vectorized particles: [P, 1…, *event]); 1 otherwise."""
        if isinstance(theta, Draws):
            return 1
        nesting = self.structure.max_plate_nesting
        return max([value.shape[0] for name, value in theta.items()
                    if value.dim() - self.structure.globals[name] > nesting], default=1)


class AutoSemiAmortizedNormal(_OnTheLocalElbo):
    """SA-VI (Kim et al. 2018): the amortized factor refined by ``steps`` Adam steps (learning rate ``lr``,
    one draw of z each) on the model's own local ELBO at the global values the guide has just drawn; see
    :class:`~amortized_pyro.autoguides.factors.SemiAmortizedFactor`.

    :param int steps: refinement steps (0: the amortized guide).
    :param float lr: their learning rate.
    :param str grad: ``"straight-through"`` or ``"unrolled"``.
    :param str optimizer: the steps' optimizer, ``"adam"`` or ``"sgd-momentum"`` (Kim et al.'s inner loop:
        momentum 0.5, each image's gradient clipped to norm 5; :class:`~amortized_pyro.local.steppers.ClippedMomentum`).
    :param float share: refine only this share of each batch's datapoints, those with the highest ``score``
        (1: every datapoint, SA-VI; the others keep the encoder's factor): :mod:`amortized_pyro.local.partial`.
    :param str score: ``"spread"``, ``"khat"`` or ``"elbo"`` (:data:`~amortized_pyro.local.partial.SCORES`).
    :param int score_draws: z draws per datapoint (and θ draw) for the score (default
        :data:`~amortized_pyro.local.partial.DEFAULT_DRAWS`: 8, khat 100; khat takes at least 25).

    The other parameters are :class:`_OnTheLocalElbo`'s (``local_log_joint``) and :class:`AutoAmortizedNormal`'s.
    """

    family = "semi-amortized"

    def __init__(self, model, *, steps=5, lr=1e-2, grad="straight-through", optimizer="adam", share=1.0,
                 score="spread", score_draws=None, **kwargs):
        super().__init__(model, **kwargs)
        steps, lr, share = count("steps", steps), positive("lr", lr), positive("share", share, at_most=1.0)
        if grad not in REFINE_GRADS or optimizer not in REFINE_OPTIMIZERS:
            raise GuideError("refinement needs grad in %s and optimizer in %s; got %r and %r"
                             % (", ".join(REFINE_GRADS), ", ".join(REFINE_OPTIMIZERS), grad, optimizer))
        score_draws = DEFAULT_DRAWS.get(score, 2) if score_draws is None else score_draws
        check_score(score, score_draws)
        self.steps, self.lr, self.grad, self.optimizer = steps, lr, grad, optimizer
        self.share, self.score, self.score_draws = share, score, score_draws

    def _setup_local(self, indices, args, kwargs, device):
        encoder = self._encoder(self.encoder_data(indices, args, kwargs), device)
        self.q_z = SemiAmortizedFactor(encoder, self.steps, self.lr, grad=self.grad, optimizer=self.optimizer,
                                       share=self.share, score=self.score, score_draws=self.score_draws)

    def local_factor(self, indices, args, kwargs, theta):
        joint = self._joint(indices, args, kwargs, theta)
        return self.q_z(self.encoder_data(indices, args, kwargs), indices, theta, self.refine_generator, joint,
                        self.particles(theta), rows_of_data=joint is self.local_log_joint)

    def on_the_local_elbo(self, indices, args, kwargs, theta):
        return (*self.local_factor(indices, args, kwargs, theta), None)


class AutoIterativeAmortizedNormal(_OnTheLocalElbo):
    """Iterative amortized inference (Marino, Yue & Mandt 2018): the encoder's factor updated ``iterations``
    times by a network of the features, the factor and the local ELBO's gradient there, each iteration's local
    ELBO added to the training objective (their objective: every iteration trained, not only the last), θ held
    fixed in the updates as SA-VI holds it; see :class:`~amortized_pyro.autoguides.factors.IterativeFactor`.
    The gradient's z draws come from the global stream in training and from ``refinement_draws``' generator
    where set (an evaluation the same every time).

    :param int iterations: T (0: the amortized guide exactly).
    :param int update_width: the update network's width (None: the encoder's ``width``); its depth is
        ``layers``.

    The other parameters are :class:`_OnTheLocalElbo`'s (``local_log_joint``) and :class:`AutoAmortizedNormal`'s.
    """

    family = "iterative"

    def __init__(self, model, *, iterations=5, update_width=None, **kwargs):
        super().__init__(model, **kwargs)
        iterations = count("iterations", iterations)
        if update_width is not None:
            count("update_width", update_width, 1)
        self.iterations, self.update_width = iterations, update_width

    def _setup_local(self, indices, args, kwargs, device):
        encoder = self._encoder(self.encoder_data(indices, args, kwargs), device)
        with outside_the_stream():  # its initial weights leave the stream as A-VI's guide leaves it: T = 0 is A-VI
            self.q_z = IterativeFactor(encoder, self.iterations, self.update_width or self.width, self.layers).to(
                encoder.loc.weight.device)

    def on_the_local_elbo(self, indices, args, kwargs, theta):
        return self.q_z.iterate(self.encoder_data(indices, args, kwargs), theta, self.refine_generator,
                                self._joint(indices, args, kwargs, theta), self.particles(theta))

    def local_factor(self, indices, args, kwargs, theta):
        loc, scale, _ = self.factor_with_terms(indices, args, kwargs, theta)
        return loc, scale


AUTOGUIDES = {cls.family: cls for cls in (AutoAmortizedNormal, AutoSemiAmortizedNormal, AutoIterativeAmortizedNormal,
                                           AutoPerDatapointNormal, AutoSharedNormal)}
"""The builders by family name (the package's ``--guide`` choices), in display order."""
