"""Pyro's JIT ELBOs train every builder, SA-VI and IA-VI included (their steps on the local ELBO run as one Python
node of the trace: :func:`amortized_pyro.local.steppers.outside_the_trace`): on calls after the traced one, with
other data, the JIT loss and gradients are the plain ELBO's at the same seed, so the trace keeps neither the
first call's data nor its random draws."""
import pytest
import torch

import pyro
from pyro.infer import JitTrace_ELBO, JitTraceMeanField_ELBO, Trace_ELBO, TraceMeanField_ELBO

from amortized_pyro.autoguides import AutoSemiAmortizedNormal
from test_autoguide_contract import BUILDERS, data, supports

GUIDES = dict(BUILDERS, **{
    "semi-amortized-unrolled": lambda model, **k: AutoSemiAmortizedNormal(model, width=8, steps=2, grad="unrolled",
                                                                          **k),
    "semi-amortized-momentum": lambda model, **k: AutoSemiAmortizedNormal(model, width=8, steps=2,
                                                                          optimizer="sgd-momentum", **k),
})
# model runs per call before the one whose loss a call returns: JitTrace_ELBO traces on its first call only
# (its later calls replay the trace); Pyro 1.9.2's JitTraceMeanField_ELBO traces again on every call (it looks for
# its compiled loss under another attribute than it stores it in): one run to find the parameters, one traced
RUNS_BEFORE = {JitTrace_ELBO: 0, JitTraceMeanField_ELBO: 2}
PLAIN = {JitTrace_ELBO: Trace_ELBO, JitTraceMeanField_ELBO: TraceMeanField_ELBO}


@pytest.fixture(autouse=True)
def clean_store():
    pyro.clear_param_store()
    yield
    pyro.clear_param_store()


def loss_and_grads(elbo, guide, x, seed, runs_before=0):
    """The loss of ``elbo``'s ``runs_before`` + 1-th model run from ``seed`` (those before it thrown away) and the
    gradients loss_and_grads leaves on the parameters, by name."""
    params = dict(pyro.get_param_store().named_parameters())
    pyro.set_rng_seed(seed)
    for _ in range(runs_before):
        elbo.loss(supports, guide, x)
    for p in params.values():
        p.grad = None
    loss = elbo.loss_and_grads(supports, guide, x)
    grads = {name: None if p.grad is None else p.grad.clone() for name, p in params.items()}
    for p in params.values():
        p.grad = None
    return loss, grads


@pytest.mark.parametrize("Elbo", [JitTrace_ELBO, JitTraceMeanField_ELBO])
@pytest.mark.parametrize("name", GUIDES)
def test_jit_elbo_is_the_plain_one_on_other_data(name, Elbo):
    pyro.set_rng_seed(0)
    guide = GUIDES[name](supports)
    guide(data(seed=0))
    jit = Elbo(ignore_jit_warnings=True)
    jit.loss_and_grads(supports, guide, data(seed=0))  # traced on the first data
    losses = []
    for seed, batch in ((3, 1), (4, 2)):  # other data, other draws
        x = data(seed=batch)
        loss, grads = loss_and_grads(jit, guide, x, seed)
        expected, expected_grads = loss_and_grads(PLAIN[Elbo](), guide, x, seed, RUNS_BEFORE[Elbo])
        assert loss == pytest.approx(expected, rel=1e-5)
        assert grads.keys() == expected_grads.keys()
        for key, grad in grads.items():
            assert (grad is None) == (expected_grads[key] is None), key
            if grad is not None:
                torch.testing.assert_close(grad, expected_grads[key], rtol=1e-4, atol=1e-4, msg=key)
        losses.append(loss)
    assert losses[0] != pytest.approx(losses[1], rel=1e-3)  # the two calls computed different numbers


@pytest.mark.parametrize("name", ["amortized", "per-datapoint", "shared", "semi-amortized", "iterative"])
def test_the_study_guides_train_under_pyros_jit_inside_pyros_param_store(name):
    """The package's study guides keep their parameters in their modules, where Pyro's JIT ELBOs cannot find them
    (a KeyError naming the first); inside pyros_param_store() they leave them in Pyro's store: the JIT's loss and
    gradients on other data than the traced call's are Trace_ELBO's at the same seed (issue 70, item 2)."""
    from amortized_pyro.models.decoder import BayesianDecoderModel
    from amortized_pyro.models.guides import make_guide
    from amortized_pyro.models.modules import pyros_param_store

    x = torch.rand(40, 12, generator=torch.Generator().manual_seed(0))
    found = []
    for Elbo in (JitTrace_ELBO, Trace_ELBO):
        pyro.clear_param_store()
        with pyros_param_store():
            torch.manual_seed(0)
            model = BayesianDecoderModel(40, 12, 3, 8)
            guide = make_guide(name, model, width=6)
            elbo = Elbo(ignore_jit_warnings=True) if Elbo is JitTrace_ELBO else Elbo()
            idx = torch.arange(10)
            pyro.set_rng_seed(1)
            elbo.loss_and_grads(model, guide, x[idx], idx)  # traced on these rows
            for p in guide.parameters():
                p.grad = None
            pyro.set_rng_seed(2)
            loss = elbo.loss_and_grads(model, guide, x[idx + 10], idx + 10)
            found.append((loss, {n: p.grad.clone() for n, p in guide.named_parameters() if p.grad is not None}))
    (jit_loss, jit_grads), (loss, grads) = found
    assert jit_loss == pytest.approx(loss, rel=1e-5)
    assert jit_grads.keys() == grads.keys() and len(grads) >= 2
    for key in grads:
        torch.testing.assert_close(jit_grads[key], grads[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("Elbo", [JitTrace_ELBO, JitTraceMeanField_ELBO])
@pytest.mark.parametrize("name", ["amortized", "per-datapoint"])
def test_outside_pyros_param_store_a_study_guide_under_pyros_jit_is_refused_in_one_line(name, Elbo):
    """Pyro's JIT looks each parameter up in its global store, where the study guides' module-local parameters are
    not: one line naming the way out, not Pyro's KeyError naming a parameter (issue 70, item 2)."""
    from amortized_pyro.errors import AmortizedPyroError
    from amortized_pyro.models.decoder import BayesianDecoderModel
    from amortized_pyro.models.guides import make_guide

    x = torch.rand(40, 12, generator=torch.Generator().manual_seed(0))
    model = BayesianDecoderModel(40, 12, 3, 8)
    guide = make_guide(name, model, width=6)
    idx = torch.arange(10)
    with pytest.raises(AmortizedPyroError, match=r"^Pyro's JIT ELBOs .* inside `with amortized_pyro\.models\.modules"
                       r"\.pyros_param_store\(\):`$") as refused:
        Elbo(ignore_jit_warnings=True).loss_and_grads(model, guide, x[idx], idx)
    assert "\n" not in str(refused.value)
    assert Trace_ELBO().loss(model, guide, x[idx], idx) > 0  # the same guide outside the JIT: no refusal
