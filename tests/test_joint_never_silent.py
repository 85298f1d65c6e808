"""Issue 68, items 3 and 6: the local log joint read off a model's trace never gives a wrong number without a word.
Observations in a plate of their own join their group however they depend on its latents (a contrast of them
included), are refused where they depend on several groups and said where they depend on none; a latent site the
guide does not cover (an enumerated one, one hidden by ``poutine.block``) is refused in one line, never counted at
a draw of its prior."""
import pytest
import torch

import pyro
import pyro.distributions as dist
from pyro import poutine
from pyro.infer import SVI, TraceEnum_ELBO

from amortized_pyro.autoguides import AutoAmortizedNormal, AutoSemiAmortizedNormal, LocalJoint, measure_gap
from amortized_pyro.autoguides.stray import ObservationsOfNoDatapoint
from amortized_pyro.errors import GuideError
from amortized_pyro.local.gaps import GapSettings

GROUPS, OBS = 5, 40
GROUP_OF = torch.arange(OBS) % GROUPS
TINY_GAP = GapSettings(importance_samples=8, theta_draws=2, score_draws=2, select_draws=2, samples=4, step_samples=2,
                       window=5, patience=1, max_steps=10, ais_steps=0)


@pytest.fixture(autouse=True)
def global_param_store():
    yield
    pyro.clear_param_store()


def contrast(group, y, n_groups):
    """Two latents per group; each observation reads their difference: a tangent of ones has no derivative."""
    with pyro.plate("groups", n_groups):
        z = pyro.sample("z", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    with pyro.plate("obs", len(y)):
        pyro.sample("y", dist.Normal(z[..., group, 0] - z[..., group, 1], 1.0), obs=y)


def counts_of(group, y, n_groups):
    """The encoder's input per group: the mean of its observations and their count."""
    count = torch.zeros(n_groups).index_add(0, group, torch.ones_like(y))
    return torch.stack([torch.zeros(n_groups).index_add(0, group, y) / count.clamp(min=1), count], -1)


def contrast_data():
    return torch.randn(OBS, generator=torch.Generator().manual_seed(3)) * 2.0


def test_a_contrast_of_a_groups_latents_joins_its_group():
    """The per-group log joint at given z: log p(z_g) + Σ_{j in g} log N(y_j; z_g0 − z_g1, 1), written by hand
    (exact; the observations were dropped: each group's term was its prior's alone)."""
    y = contrast_data()
    guide = AutoAmortizedNormal(contrast, plate="groups", encoder_input=counts_of, width=8)
    guide(GROUP_OF, y, GROUPS)
    u = torch.randn(3, GROUPS, 2, generator=torch.Generator().manual_seed(4))  # 3 draws of z
    got = LocalJoint(contrast, guide.structure, (GROUP_OF, y, GROUPS), {})(None, u, {})
    likelihood = dist.Normal(u[:, GROUP_OF, 0] - u[:, GROUP_OF, 1], 1.0).log_prob(y)
    expected = dist.Normal(0.0, 1.0).log_prob(u).sum(-1) + torch.zeros(3, GROUPS).index_add(1, GROUP_OF, likelihood)
    torch.testing.assert_close(got, expected)


def test_the_gaps_log_p_of_a_contrast_model_is_the_closed_form():
    """measure_gap's log p(y_g) against the linear-Gaussian marginal y_g ~ N(0, 2·11ᵀ + I) of each group's 8
    observations (−12 to −22 nats here; it read 0.00, the prior's, before). log p is an importance-weighted bound
    from q*, a diagonal Gaussian, of a posterior whose two coordinates correlate (precision I + 8·(1, −1)(1, −1)ᵀ):
    in expectation it lies below the closed form by at most q*'s own gap, the mean-field KL ½ log(Λ₁₁Λ₂₂ / det Λ)
    = ½ log(81 / 17) = 0.78 nats, and above it only by Monte Carlo noise (0.05 nats, 1,000 importance draws)."""
    y = contrast_data()
    guide = AutoAmortizedNormal(contrast, plate="groups", encoder_input=counts_of, width=8)
    settings = GapSettings(importance_samples=1000, theta_draws=1, score_draws=1, select_draws=1, samples=100,
                           step_samples=8, window=50, patience=2, max_steps=600, ais_steps=0)
    report = measure_gap(contrast, guide, GROUP_OF, y, GROUPS, settings=settings)
    closed = torch.stack([dist.MultivariateNormal(torch.zeros(8), 2.0 * torch.ones(8, 8) + torch.eye(8))
                          .log_prob(y[GROUP_OF == g]) for g in range(GROUPS)])
    mean_field_kl = 0.5 * torch.log(torch.tensor(81.0 / 17.0))
    log_p = torch.tensor(report["per_image"]["log_px"])
    assert ((log_p <= closed + 0.05) & (log_p >= closed - mean_field_kl)).all(), (log_p, closed)


def test_an_observation_of_a_contrast_of_two_groups_is_refused():
    """y_j ~ N(a_g − a_{g+1}, 1): its derivative along every group alike is zero, so it was dropped without a
    word; it depends on two groups, refused in one line."""
    def neighbours(y, n_groups):
        with pyro.plate("groups", n_groups):
            a = pyro.sample("a", dist.Normal(0.0, 1.0))
        with pyro.plate("obs", len(y)):
            pyro.sample("infections", dist.Normal(a[..., :len(y)] - a[..., 1:len(y) + 1], 1.0), obs=y)

    guide = AutoAmortizedNormal(neighbours, plate="groups", encoder_input=lambda y, n: torch.ones(n, 1), width=8)
    guide(torch.zeros(3), 4)
    with pytest.raises(GuideError, match="depends on several of its datapoints") as refusal:
        measure_gap(neighbours, guide, torch.zeros(3), 4, settings=TINY_GAP)
    assert "\n" not in str(refusal.value)
    # SA-VI's steps read the same joint: the same refusal, not advice about learning rates (the steps' own
    # one-line conversion of values the model refuses leaves ours as they are: this site's name once matched it)
    refining = AutoSemiAmortizedNormal(neighbours, plate="groups", encoder_input=lambda y, n: torch.ones(n, 1),
                                       width=8)
    with pytest.raises(GuideError, match="^the observed site 'infections' sits in another plate .* depends on several"):
        refining(torch.zeros(3), 4)


def test_observations_of_no_group_are_said_in_one_line():
    """Observations whose group index is −1 read no group's latent: their terms belong to no group's log joint,
    said in one line (naming the site and how many), not left out without a word."""
    group = torch.cat([GROUP_OF[:37], torch.full((3,), -1)])

    def some_ungrouped(group, y, n_groups):
        with pyro.plate("groups", n_groups):
            a = pyro.sample("a", dist.Normal(0.0, 1.0))
        with pyro.plate("obs", len(y)):
            pyro.sample("y", dist.Normal(torch.where(group >= 0, a[..., group.clamp(min=0)], 0.0), 1.0), obs=y)

    y = contrast_data()
    guide = AutoAmortizedNormal(some_ungrouped, plate="groups", encoder_input=lambda g, y, n: torch.ones(n, 1),
                                width=8)
    with pytest.warns(ObservationsOfNoDatapoint, match="3 of 40 observations of the site 'y' depend on no "
                                                       "datapoint's latents") as said:
        measure_gap(some_ungrouped, guide, group, y, GROUPS, settings=TINY_GAP)
    assert all("\n" not in str(w.message) for w in said if w.category is ObservationsOfNoDatapoint)


TOPICS, VOCABULARY, WORDS, DOCUMENTS = 3, 6, 8, 20
TOPIC_WORDS = torch.softmax(2.0 * torch.randn(TOPICS, VOCABULARY, generator=torch.Generator().manual_seed(5)), -1)


def lda(words):
    """Pyro's examples/lda.py, small: topic weights per document in the data plate, each word's topic enumerated
    in a nested plate, the words observed ([WORDS, DOCUMENTS], as there)."""
    with pyro.plate("data", words.shape[-1], dim=-1):
        doc_topics = pyro.sample("doc_topics", dist.Dirichlet(torch.ones(TOPICS)))
        with pyro.plate("words", words.shape[0], dim=-2):
            word_topics = pyro.sample("word_topics", dist.Categorical(doc_topics), infer={"enumerate": "parallel"})
            pyro.sample("doc_words", dist.Categorical(TOPIC_WORDS[word_topics]), obs=words)


def lda_guide_and_data():
    generator = torch.Generator().manual_seed(6)
    topics = torch.randint(TOPICS, (WORDS, DOCUMENTS), generator=generator)
    words = torch.multinomial(TOPIC_WORDS[topics].reshape(-1, VOCABULARY), 1, generator=generator).reshape(topics.shape)
    histogram = torch.nn.functional.one_hot(words, VOCABULARY).float().mean(0)  # [DOCUMENTS, VOCABULARY]
    guide = AutoAmortizedNormal(poutine.block(lda, hide=["word_topics"]), encoder_input=lambda w: histogram, width=8)
    pyro.set_rng_seed(0)
    svi = SVI(lda, guide, pyro.optim.Adam({"lr": 0.01}), TraceEnum_ELBO(max_plate_nesting=2))
    for _ in range(3):
        svi.step(words)
    return guide, words


def test_an_enumerated_site_is_refused_in_one_line():
    """The training model (its word topics enumerated, as TraceEnum_ELBO sums them) given to measure_gap: the
    local log joint held a draw of their prior and read log p(x_n) several nats low; refused in one line, naming
    the site and what to give instead."""
    guide, words = lda_guide_and_data()
    with pytest.raises(GuideError, match="'word_topics' is a discrete latent site the guide does not cover.*summed "
                                         "out by hand") as refusal:
        measure_gap(lda, guide, words, settings=TINY_GAP)
    assert "\n" not in str(refusal.value)


def lda_summed(words):
    """The same model with each word's topic summed out by hand: p(word | doc_topics) = doc_topics · topic_words."""
    with pyro.plate("data", words.shape[-1], dim=-1):
        doc_topics = pyro.sample("doc_topics", dist.Dirichlet(torch.ones(TOPICS)))
        with pyro.plate("words", words.shape[0], dim=-2):
            pyro.sample("doc_words", dist.Categorical(doc_topics @ TOPIC_WORDS), obs=words)


def test_the_model_with_the_site_summed_out_is_measured():
    """What the refusal asks for: the model with the word topics summed out by hand, the guide the same, is
    measured; its local log joint at given values is the one written by hand."""
    guide, words = lda_guide_and_data()
    report = measure_gap(lda_summed, guide, words, settings=TINY_GAP)
    assert all(torch.isfinite(torch.tensor(report["per_image"]["log_px"])))
    u = torch.randn(2, DOCUMENTS, TOPICS - 1, generator=torch.Generator().manual_seed(8))
    got = LocalJoint(lda_summed, guide.structure, (words,), {})(None, u, {})
    to_simplex = guide.structure.locals[0].transform
    doc_topics = to_simplex(u)
    expected = dist.Dirichlet(torch.ones(TOPICS)).log_prob(doc_topics) + to_simplex.log_abs_det_jacobian(
        u, doc_topics) + (doc_topics @ TOPIC_WORDS).log().gather(-1, words.T.expand(2, -1, -1)).sum(-1)
    torch.testing.assert_close(got, expected)


def test_a_site_hidden_by_block_is_refused_in_one_line():
    """The guide's own model (the word topics hidden by poutine.block: drawn from their prior where no trace
    shows them) given to measure_gap: its log joint at fixed values changes from call to call; refused in one
    line."""
    guide, words = lda_guide_and_data()
    with pytest.raises(GuideError, match="changes from call to call") as refusal:
        measure_gap(poutine.block(lda, hide=["word_topics"]), guide, words, settings=TINY_GAP)
    assert "\n" not in str(refusal.value)


def test_a_continuous_latent_the_guide_does_not_cover_is_refused():
    """A continuous latent in the data plate that the guide was not built on (hidden from its builder): it was
    counted in the local log joint at a draw of its prior; refused in one line."""
    def two_latents(x):
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", dist.Normal(0.0, 1.0))
            w = pyro.sample("w", dist.Normal(0.0, 1.0))
            pyro.sample("x", dist.Normal(z + w, 1.0), obs=x)

    x = torch.randn(6, generator=torch.Generator().manual_seed(7))
    guide = AutoAmortizedNormal(poutine.block(two_latents, hide=["w"]), encoder_input=lambda x: x[:, None], width=8)
    guide(x)
    with pytest.raises(GuideError, match="latent site 'w' is not one of the guide's") as refusal:
        measure_gap(two_latents, guide, x, settings=TINY_GAP)
    assert "\n" not in str(refusal.value)


def test_sa_vi_on_a_model_with_a_site_hidden_by_block_is_refused_at_its_first_call():
    """SA-VI's steps read the local ELBO off the model it was built on: with the word topics hidden by
    poutine.block, a draw of their prior at every step (issue 68, item 6); refused at the guide's first call, in
    one line (it trained without a word before)."""
    generator = torch.Generator().manual_seed(6)
    words = torch.randint(VOCABULARY, (WORDS, DOCUMENTS), generator=generator)
    histogram = torch.nn.functional.one_hot(words, VOCABULARY).float().mean(0)
    guide = AutoSemiAmortizedNormal(poutine.block(lda, hide=["word_topics"]), encoder_input=lambda w: histogram,
                                    width=8, steps=2)
    with pytest.raises(GuideError, match="changes from call to call") as refusal:
        guide(words)
    assert "\n" not in str(refusal.value)
    summed = AutoSemiAmortizedNormal(lda_summed, encoder_input=lambda w: histogram, width=8, steps=2)
    assert summed(words)["doc_topics"].shape == (DOCUMENTS, TOPICS)  # the model summed out by hand: served


def sums_every_dim(x):
    """A global weight used through ``w.sum()`` with no dim: broadcast-unsafe without an error (stacked draws
    of w are summed together), the kind of model the LDA example's Dirichlet(topic_weights) in its plate is."""
    w = pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))
    with pyro.plate("data", len(x)):
        z = pyro.sample("z", dist.Normal(0.0, 1.0))
        pyro.sample("x", dist.Normal(z * w.sum(), 1.0), obs=x)


def test_stacked_draws_that_give_other_numbers_are_caught_and_run_one_at_a_time():
    """Stacked θ draws of a model that sums over every dimension: other log joints, no error; the gap's entry
    points (steady) compare two draws stacked with one at a time, warn and run one at a time: the same numbers as
    draws="one-at-a-time" (without the check the stacked numbers differ: the check is what keeps them right)."""
    from amortized_pyro.autoguides.local_joint import NotBroadcastSafe
    x = torch.randn(6, generator=torch.Generator().manual_seed(9))
    guide = AutoAmortizedNormal(sums_every_dim, width=4)
    guide(x)
    u = torch.randn(4, 6, 1, generator=torch.Generator().manual_seed(10))
    theta = {"w": torch.randn(4, 1, 3, generator=torch.Generator().manual_seed(11))}  # a draw dim left of the plate
    exact = LocalJoint(sums_every_dim, guide.structure, (x,), {}, draws="one-at-a-time")(None, u, theta)
    unchecked = LocalJoint(sums_every_dim, guide.structure, (x,), {})(None, u, theta)
    assert not torch.allclose(unchecked, exact, atol=1e-3)
    with pytest.warns(NotBroadcastSafe, match="stacked differ from one at a time"):
        checked = LocalJoint(sums_every_dim, guide.structure, (x,), {}, steady=True)(None, u, theta)
    torch.testing.assert_close(checked, exact)
