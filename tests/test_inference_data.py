"""to_inference_data: a guide builder's draws as ArviZ's InferenceData, each group checked against the model's
closed form at the drawn values, written to netCDF and read back unchanged, and read by az.loo."""
import math
import warnings

import numpy as np
import pytest
import torch

import pyro
import pyro.distributions as dist

from amortized_pyro.autoguides.inference_data import to_inference_data
from test_diagnose import exact_guide, orthogonal_model, trained_with_globals

az = pytest.importorskip("arviz")


@pytest.fixture(autouse=True)
def global_param_store():
    yield
    pyro.clear_param_store()


def closed_forms(model, x, z, W, sigma):
    """log p(x_n | z_n), log p(z_n) per draw and datapoint, for z [D, N, dz], W [D, dx, dz], σ [D]."""
    mean = torch.einsum("dnk,dxk->dnx", z, W) + model.b
    log_lik = dist.Normal(mean, sigma[:, None, None]).log_prob(x).sum(-1)
    return log_lik, dist.Normal(0.0, 1.0).log_prob(z).sum(-1)


def test_each_group_equals_the_closed_form():
    model = orthogonal_model(n=30)
    guide = exact_guide(model, model.x, scale=0.8)
    data = to_inference_data(model.model, guide, model.x, num_samples=200, seed=1)
    z = torch.as_tensor(data.posterior["z"].values[0])  # [draws, N, 3]
    assert data.posterior["z"].dims == ("chain", "draw", "data", "z_dim_0") and z.shape == (200, 30, 3)
    draws = z.shape[0]
    log_lik, log_prior = closed_forms(model, model.x, z, model.W.expand(draws, -1, -1),
                                      torch.full((draws,), model.sigma))
    assert np.allclose(data.log_likelihood["x"].values[0], log_lik.numpy(), atol=1e-4)
    with torch.no_grad():
        loc, scale = guide.local_factor(torch.arange(30), (model.x,), {}, {})
    log_q = dist.Normal(loc, scale).log_prob(z).sum(-1)
    assert np.allclose(data.sample_stats["log_weight"].values[0], (log_lik + log_prior - log_q).numpy(), atol=1e-3)
    # the draws are the guide's: their mean within 4 standard errors of its mean, per coordinate
    assert ((z.mean(0) - loc).abs() < 4 * scale / math.sqrt(draws)).float().mean() > 0.97
    assert np.allclose(data.observed_data["x"].values, model.x.numpy())
    assert data.importance["pareto_k"].dims == ("data",)


def test_globals_and_the_netcdf_round_trip(tmp_path):
    model, guide = trained_with_globals(20, 30)
    data = to_inference_data(model.model, guide, model.x, num_samples=50)
    W, sigma = (torch.as_tensor(data.posterior[name].values[0]) for name in ("W", "sigma"))
    assert W.shape == (50, 6, 3) and len(set(sigma.tolist())) == 50  # one θ draw per draw
    z = torch.as_tensor(data.posterior["z"].values[0])
    log_lik, _ = closed_forms(model, model.x, z, W, sigma)
    assert np.allclose(data.log_likelihood["x"].values[0], log_lik.numpy(), atol=1e-3)
    path = tmp_path / "posterior.nc"
    data.to_netcdf(str(path))
    back = az.from_netcdf(str(path))
    assert set(back.groups()) == set(data.groups())
    for group in data.groups():
        assert back[group].equals(data[group]), group
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ArviZ warns of high Pareto k, as it should for these draws
        loo = az.loo(back, pointwise=True)
    assert loo["n_data_points"] == 20 and np.isfinite(loo["elpd_loo"])


def test_the_package_models_run_exports_its_own_sites(tmp_path):
    from amortized_pyro.runs.fit import finished_run
    from conftest import tiny_finished_run
    result, data = finished_run(tiny_finished_run(tmp_path / "run"), log=lambda line: None)
    exported = to_inference_data(result.model, result.guide, data.train[:10], torch.arange(10), num_samples=20)
    assert set(exported.posterior.data_vars) == set(result.guide.structure.globals) | {"z"}
    assert exported.posterior["z"].shape == (1, 20, 10, 3)
    assert np.isfinite(exported.log_likelihood["x"].values).all()
