"""What a run's checkpoint.pt and params.pt hold, and how a run is put back from them (the layout; the files'
writing and reading are :mod:`~amortized_pyro.runs.store`'s)."""
import torch

from amortized_pyro.errors import AmortizedPyroError
from amortized_pyro.support.jsonio import from_json
from amortized_pyro.support.streams import rng_states, set_rng_states

FORMAT = 3  # 1: Pyro param-store state (before the guides owned their parameters); 2: the guide's state_dict,
# q(θ) under PyroParam's private names (q_theta.loc_unconstrained, q_theta.scale_unconstrained: log s), read
# as 3 (RENAMED_IN_3); 3: the guide's state_dict, q(θ) as q_theta.loc and q_theta.log_scale
RENAMED_IN_3 = {"q_theta.loc_unconstrained": "q_theta.loc", "q_theta.scale_unconstrained": "q_theta.log_scale"}


def upgrade(value):
    """A format-2 checkpoint or parameters file read as format 3: the same tensors under the new names (the
    optimizer's state is by position, in name order, which the renaming keeps)."""
    if isinstance(value, dict) and value.get("format") == 2:
        value = dict(value, format=3, guide={RENAMED_IN_3.get(k, k): v for k, v in value["guide"].items()})
    return value


def checkpoint_state(guide, state, device, rng=None):
    """The checkpoint of a run at ``state`` (a TrainingState) with ``guide``'s parameters and the random
    states ``rng`` (by default the global ones)."""
    return {"format": FORMAT, "epoch": state.epoch, "guide": guide.state_dict(),
            "optimizer": state.optimizer.state_dict(), "rng": rng or rng_states(device),
            "evaluation_rng": state.evaluation_rng.get_state(), "history": state.history,
            "train_seconds": state.train_seconds}


def load_guide_state(guide, state, what):
    """``guide.load_state_dict(state)``, a state of another guide (another run's ``what``, a file of another
    guide or version) refused in one line naming what differs, not torch's list of every key."""
    ours = guide.state_dict()
    missing, unexpected = sorted(set(ours) - set(state)), sorted(set(state) - set(ours))
    shaped = sorted(k for k in set(ours) & set(state) if torch.is_tensor(state[k]) and state[k].shape != ours[k].shape)
    if missing or unexpected or shaped:
        parts = ["%d missing (%s)" % (len(missing), missing[0])] if missing else []
        parts += ["%d not this guide's (%s)" % (len(unexpected), unexpected[0])] if unexpected else []
        parts += ["%d of another shape (%s)" % (len(shaped), shaped[0])] if shaped else []
        raise AmortizedPyroError("%s holds the parameters of another guide than this run's config.json builds: %s; "
                                 "another run's file?" % (what, ", ".join(parts)))
    guide.load_state_dict(state)


def restore(checkpoint, guide, state, schedule, device):
    """Put a checkpoint back into ``guide`` and ``state``: parameters, optimizer (with the schedule's
    learning rate and betas, which a resume may change), every random state, the history."""
    load_guide_state(guide, checkpoint["guide"], "checkpoint.pt")
    try:
        state.optimizer.load_state_dict(checkpoint["optimizer"])
    except (ValueError, KeyError, TypeError) as e:  # torch's check of the groups' sizes
        raise AmortizedPyroError("checkpoint.pt holds another optimizer's state than this run's guide takes (%s): "
                                 "another run's file?" % str(e).splitlines()[0]) from None
    for group in state.optimizer.param_groups:
        group.update(lr=schedule.lr, betas=(schedule.beta1, schedule.beta2))
    set_rng_states(checkpoint["rng"], device)
    state.evaluation_rng.set_state(checkpoint["evaluation_rng"])
    state.epoch, state.train_seconds = checkpoint["epoch"], checkpoint["train_seconds"]
    state.history = [from_json(r) for r in checkpoint["history"]]
