"""Does torch.compile work on the package's ELBO, and does it pay? (CPU check for BENCHMARKS.md)

    python bench/try_torch_compile.py

Compiles ``DeviceTrace_ELBO.differentiable_loss`` for the amortized guide at the reference configuration,
checks that it computes the plain loss for the same seed, then times forward+backward for the plain,
torch.jit (``--jit``) and torch.compile versions, interleaved.
"""
import statistics
import time
import warnings

import torch

import pyro
from amortized_pyro import BayesianDecoderModel, make_guide
from amortized_pyro.svi import make_elbo

warnings.filterwarnings("ignore")
N = 10000
x_all = torch.rand(N, 784)
pyro.set_rng_seed(0)
model, guide = BayesianDecoderModel(N), make_guide("amortized", N)
plain, jit = make_elbo(), make_elbo(jit=True)
idx = torch.arange(1000)
plain.differentiable_loss(model, guide, x_all[idx], idx)
jit.differentiable_loss(model, guide, x_all[idx], idx)
pyro.enable_validation(False)
compiled = torch.compile(lambda x, i: plain.differentiable_loss(model, guide, x, i))
start = time.perf_counter()
compiled(x_all[idx], idx).backward()
print("torch.compile: first call (compilation) %.1f s" % (time.perf_counter() - start))
pyro.set_rng_seed(3)
a = compiled(x_all[idx], idx).item()
pyro.set_rng_seed(3)
b = plain.differentiable_loss(model, guide, x_all[idx], idx).item()
print("same seed: compiled loss %.6g, plain loss %.6g, relative difference %.2g" % (a, b, abs(a - b) / abs(b)))
times = {"plain": [], "jit": [], "compile": []}
fns = {"plain": lambda: plain.differentiable_loss(model, guide, x_all[idx], idx),
       "jit": lambda: jit.differentiable_loss(model, guide, x_all[idx], idx),
       "compile": lambda: compiled(x_all[idx], idx)}
for _ in range(10):
    for name, fn in fns.items():
        start = time.perf_counter()
        fn().backward()
        times[name].append(1000 * (time.perf_counter() - start))
print("forward+backward, median ms: " + ", ".join("%s %.1f" % (k, statistics.median(v)) for k, v in times.items()))
