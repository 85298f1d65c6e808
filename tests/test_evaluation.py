"""The reconstructions and their MSEs against an independent computation: the decoder written out in numpy
(float64) from θ's tensors, the mean image by numpy, the predictive mean averaged by hand over the same draws."""
import numpy as np
import torch

from amortized_pyro import BayesianDecoderModel, make_guide
from amortized_pyro.inference.evaluation import factor, mean_image_mse, predict, reconstruct
from amortized_pyro.runs.data import Data

N, X_DIM, Z_DIM, HIDDEN, SLOPE = 10, 12, 3, 5, 0.2


def decoder_numpy(z, theta):
    """z W1ᵀ + b1, LeakyReLU(0.2), ·W2ᵀ + b2, LeakyReLU, ·W3ᵀ + b3: the normal likelihood's mean."""
    w = {k: v.detach().double().numpy() for k, v in theta.items()}
    h = np.asarray(z, dtype=np.float64)
    for layer in (1, 2):
        h = h @ w["decoder.w%d" % layer].T + w["decoder.b%d" % layer]
        h = np.where(h > 0, h, SLOPE * h)
    return h @ w["decoder.w3"].T + w["decoder.b3"]


def setting():
    torch.manual_seed(0)
    model = BayesianDecoderModel(N, X_DIM, Z_DIM, HIDDEN)
    guide = make_guide("amortized", model, width=4)
    with torch.no_grad():  # q(θ) away from its initialisation, so that every weight matters
        for name, value in guide.q_theta.named_parameters():
            value.copy_(0.5 * torch.randn(value.shape) + (-1.0 if "scale" in name else 0.0))
    return model, guide, torch.rand(N, X_DIM)


def test_the_plug_in_reconstruction_and_the_mean_image_mse_are_the_numpy_ones():
    model, guide, x = setting()
    loc, _ = factor(guide, x)
    expected = decoder_numpy(loc.detach().numpy(), guide.global_mean())
    assert np.allclose(reconstruct(model, guide, x).numpy(), expected, atol=1e-5)
    data = Data(x[:7], x[7:], "test images")
    got = mean_image_mse(data)
    train, test = x[:7].double().numpy(), x[7:].double().numpy()
    assert np.isclose(got["train_mse"], np.mean((train - train.mean(0)) ** 2))
    assert np.isclose(got["test_mse"], np.mean((test - train.mean(0)) ** 2))


def test_the_predictive_mean_averages_the_decoder_over_the_same_draws():
    model, guide, x = setting()
    loc, scale = factor(guide, x)
    draws, generator = 5, torch.Generator().manual_seed(3)
    by_hand = np.zeros((N, X_DIM))
    for _ in range(draws):
        theta = guide.global_sample(generator)
        z = loc + scale * torch.randn(loc.shape, generator=generator)
        by_hand += decoder_numpy(z.detach().numpy(), theta) / draws
    got = predict(model, guide, x, None, draws, torch.Generator().manual_seed(3))
    assert np.allclose(got.numpy(), by_hand, atol=1e-5)
    assert not np.allclose(by_hand, decoder_numpy(loc.detach().numpy(), guide.global_mean()), atol=1e-2)
