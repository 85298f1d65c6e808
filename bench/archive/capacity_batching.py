"""Would the capacity sweep gain by training its encoders of one width (different seeds) as one batched model?
An upper bound: one encoder-training step (amortized_pyro.autoguides.capacity.encoder_step, on the frozen decoder) on a
minibatch of R·B images against R steps on B images each, interleaved. R encoders batched would cost at
least the former (R encoders' own layers add to it; the decoder's work is the same), so if R steps of B cost
about what one step of R·B costs, batching the seeds cannot pay.

    OMP_NUM_THREADS=1 python bench/archive/capacity_batching.py RUN_DIR [--replicas 3] [--rounds 5] [--steps 30]
"""
import argparse
import time

import torch

from amortized_pyro.autoguides.capacity import encoder_step
from amortized_pyro.models.guides import make_guide
from amortized_pyro.runs.fit import finished_run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=250)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    result, data = finished_run(args.run_dir, "cpu", lambda *a: None)
    model, q_theta, x = result.model, result.guide.q_theta, data.train
    torch.manual_seed(0)
    guide = make_guide("amortized", model, width=args.width)
    guide.q_theta.load_state_dict(q_theta.state_dict())
    optimizer = torch.optim.Adam(guide.q_z.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)

    def step(rows):
        encoder_step(model, guide, (x[rows], rows), {}, optimizer=optimizer, generator=generator)

    def timed(batch, repeat):
        rows = torch.arange(batch)
        step(rows)  # warm-up
        began = time.perf_counter()
        for _ in range(args.steps):
            for _ in range(repeat):
                step(rows)
        return 1000 * (time.perf_counter() - began) / args.steps

    R, B = args.replicas, args.batch_size
    print("torch %s, %d thread(s); ms per round of %d images (mean over %d rounds)"
          % (torch.__version__, torch.get_num_threads(), R * B, args.steps))
    print("| round | %d steps of %d | 1 step of %d | ratio |\n|---|---|---|---|" % (R, B, R * B))
    for i in range(args.rounds):
        apart, together = timed(B, R), timed(R * B, 1)
        print("| %d | %.1f | %.1f | %.2f |" % (i + 1, apart, together, apart / together))


if __name__ == "__main__":
    main()
