"""A run's images: prepared for its FitConfig (loaded or given, binarized, checked against the likelihood and,
for a conditional model, for labels), recorded in its run directory (:func:`data_info`), and loaded again, checked by
their fingerprint, wherever the run is read later (:func:`run_data`)."""
from dataclasses import replace

from amortized_pyro.errors import AmortizedPyroError, InvalidSettings
from amortized_pyro.inference.evaluation import mean_image_mse
from amortized_pyro.runs.data import checked_data, load_data


def prepare_data(config, data=None, log=print):
    """The run's data: loaded (or given), binarized where asked, checked against the likelihood and, for a
    conditional model, for labels (their absence a usage error, in one line)."""
    if data is None:
        data = load_data(config.dataset, config.data_dir, config.n_obs, config.n_test, config.seed,
                         config.download, log, binarize=config.binarize, grayscale=config.grayscale)
    else:
        data = checked_data(data)
        data = data.grayscale() if config.grayscale else data
        data = data.binarize(config.seed) if config.binarize and not data.binarized else data
    if config.conditional:
        try:
            data.labels_or_refuse("--conditional")
        except AmortizedPyroError as e:  # a usage error: the option meets the data
            raise InvalidSettings(str(e), ["conditional"]) from None
    if config.likelihood == "bernoulli" and not data.is_binary():  # a usage error: the options meet the data
        raise InvalidSettings("--likelihood bernoulli needs binary images, and these are not: add --binarize",
                              ["likelihood", "binarize"])
    return data


def data_info(data):
    return {"name": data.name, "source": data.source, "origin": data.origin, "n_obs": data.train.shape[0],
            "n_test": data.test.shape[0], "x_dim": data.train.shape[1], "image_shape": list(data.shape), "binarized": data.binarized,
            "fingerprint": data.fingerprint(), "mean_image_mse": mean_image_mse(data),
            "labels": None if data.train_labels is None else {"n_classes": data.n_classes,
                                                               "fingerprint": data.labels_fingerprint()}}


def run_data(path, info, config, data=None, log=print):
    """The images the run in ``path`` was trained on: ``data`` where given, else loaded again from where the
    run recorded them (``origin``: the source actually used, so a run of ``mnist`` that fell back to the
    shipped sample reloads the sample, a relative path is the absolute one it was, and the subset is drawn
    with the seed it was drawn with), whatever the current directory. Refused in one line, naming both fingerprints, where they are other images."""
    if data is None:
        origin = info["data"].get("origin") or {"dataset": info["data"]["name"], "data_dir": config.data_dir}
        # the subset's seed: a comparison draws every run's images from its --data-seed, not the run's seed
        # and its sizes as recorded: images given to fit() were cut to their own sizes, not the config's
        data = prepare_data(replace(config, dataset=origin["dataset"], data_dir=origin["data_dir"],
                                    seed=origin.get("seed", config.seed), n_obs=info["data"]["n_obs"],
                                    n_test=info["data"]["n_test"]), None, log)
    else:
        data = prepare_data(config, data, log)
    recorded = info["data"]["fingerprint"]
    if data.fingerprint() != recorded:
        raise AmortizedPyroError("%s was trained on other images: these (%s) have fingerprint %s, the run's (%s) %s"
                                 % (path, data.source, data.fingerprint()[:12], info["data"]["source"], recorded[:12]))
    return data
