"""The convolutional decoder and encoder: the decoder against torch.nn's own layers with the same weights, its
draws batched as grouped convolutions against one draw at a time, in every layout the ELBO, SA-VI and the gap
use; every guide trains with it (particles too) and the gap measures it."""
import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from amortized_pyro.autoguides.encoders import ConvBody
from amortized_pyro.cli.commands import cli
from amortized_pyro.models.guides import ENCODER_GUIDES, GUIDES
from amortized_pyro.models.networks import LEAKY_SLOPE, ConvDecoder

Z, H = 3, 16
TINY = ["--dataset", "mnist-sample", "--n-obs", "40", "--n-test", "10", "--epochs", "2", "--batch-size", "20",
        "--hidden", "8", "--z-dim", "2", "--width", "4", "--no-progress", "--device", "cpu"]


def weights(decoder, draws=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    lead = () if draws is None else (draws,)
    return {k: 0.3 * torch.randn(lead + v, generator=generator) for k, v in decoder.shapes.items()}


@pytest.mark.parametrize("image", [(1, 28, 28), (3, 32, 32)])
def test_the_conv_decoder_is_torchs_layers_with_the_same_weights(image):
    decoder = ConvDecoder(Z, H, image)
    theta = weights(decoder)
    c0, c1, c = decoder.channels
    net = nn.Sequential(nn.Linear(Z, theta["decoder.b1"].numel()), nn.LeakyReLU(LEAKY_SLOPE),
                        nn.Unflatten(1, (c0,) + decoder.grid), nn.ConvTranspose2d(c0, c1, 4, 2, 1),
                        nn.LeakyReLU(LEAKY_SLOPE), nn.ConvTranspose2d(c1, c, 4, 2, 1), nn.Flatten())
    with torch.no_grad():
        for layer, (w, b) in zip((net[0], net[3], net[5]), (("w1", "b1"), ("k2", "b2"), ("k3", "b3"))):
            layer.weight.copy_(theta["decoder." + w])
            layer.bias.copy_(theta["decoder." + b])
    z = torch.randn(5, Z)
    out = decoder(z, theta)
    assert out.shape == (5, c * image[1] * image[2])  # one row per image, channel-first
    assert torch.allclose(out, net(z), atol=1e-5)


@pytest.mark.parametrize("layout", ["particles [P, B]", "broadcast [1, P, B]", "gap [P, S, B]"])
def test_draws_batched_as_grouped_convolutions_equal_one_draw_at_a_time(layout):
    decoder, draws = ConvDecoder(Z, H, (3, 32, 32)), 3
    theta = weights(decoder, draws)
    shape = {"particles [P, B]": (draws, 4, Z), "broadcast [1, P, B]": (1, draws, 4, Z),
             "gap [P, S, B]": (draws, 2, 4, Z)}[layout]
    z = torch.randn(shape)
    out = decoder(z, theta)
    for p in range(draws):
        one = {k: v[p] for k, v in theta.items()}
        if layout == "broadcast [1, P, B]":
            assert torch.allclose(out[0, p], decoder(z[0, p], one), atol=1e-5)
        else:
            assert torch.allclose(out[p], decoder(z[p], one), atol=1e-5)


def test_the_conv_encoder_takes_rows_and_leading_dimensions():
    body = ConvBody((3, 32, 32), width=8, layers=2)
    x = torch.rand(2, 5, 3 * 32 * 32)
    out = body(x)
    assert out.shape == (2, 5, 8)
    assert torch.allclose(out[1, 3], body(x[1, 3:4])[0], atol=1e-6)


@pytest.mark.parametrize("guide", GUIDES)
def test_every_guide_trains_with_conv_networks_and_gap_measures_them(tmp_path, guide):
    run = tmp_path / "run"
    extra = ["--refine-steps", "2"] if guide == "semi-amortized" else ["--particles", "2"]
    if guide in ENCODER_GUIDES:  # the encoder's options go with the encoder guides only (refused elsewhere)
        extra += ["--encoder", "conv"]
    tiny = TINY if guide in ENCODER_GUIDES else [a for a in TINY if a not in ("--width", "4")]
    result = CliRunner().invoke(cli, ["fit", "--guide", guide, "--decoder", "conv", "--out", str(run), *tiny, *extra])
    assert result.exit_code == 0, result.output
    info = json.loads((run / "config.json").read_text())
    assert info["config"]["decoder"] == "conv" and info["data"]["image_shape"] == [1, 28, 28]
    report = tmp_path / "gap.json"
    result = CliRunner().invoke(cli, ["gap", str(run), "--split", "train", "--n-images", "3", "--theta-draws", "2",
                                      "--score-draws", "2", "--importance-samples", "10", "--max-steps", "40",
                                      "--ais-steps", "3", "--no-progress", "--out", str(report)])
    assert result.exit_code == 0, result.output
    gap = json.loads(report.read_text())
    assert gap["coupling_gap"] is not None and all(v == v for v in gap["per_image"]["log_px"])  # finite, no NaN


def test_a_conv_decoder_refuses_images_it_cannot_produce(tmp_path):
    images = tmp_path / "odd.npy"
    import numpy as np
    np.save(images, np.random.default_rng(0).random((30, 30, 30)).astype(np.float32))
    result = CliRunner().invoke(cli, ["fit", "--decoder", "conv", "--out", str(tmp_path / "run"), *TINY,
                                      "--dataset", str(images)])
    assert result.exit_code == 1 and "divisible by 4" in result.output and "Traceback" not in result.output
