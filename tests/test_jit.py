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
