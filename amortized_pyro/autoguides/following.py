"""What a guide builder does at each call to follow its model (:class:`FollowsModel`, a mixin of
:class:`~amortized_pyro.autoguides.base.AutoLocalGuide`): the data plate of the call, read off the model
(:func:`~.plates.read_model_plate`) or given and checked against it, with the model's scales; and the model kept
through pickling wherever those reads need it.
"""
import pickle

import torch

import pyro
from pyro.poutine.util import is_validation_enabled

from amortized_pyro.autoguides.masking import check_unmasked
from amortized_pyro.autoguides.plates import read_model_plate
from amortized_pyro.errors import GuideError
from amortized_pyro.support.streams import outside_the_stream


class FollowsModel:
    """The model's plate and scales at each call, and the model through pickling (the module docstring); reads
    the guide's ``plate``, ``structure``, ``prototype_trace``, ``local_mask``, ``_user_plates`` (the user's
    ``create_plates``) and ``_scaled_model`` (the model scaled its latent sites at the prototype), and sets
    ``call_plate`` (:class:`~.plates.ModelPlate`, or None where the plate is given) and ``call_scales``."""

    @property
    def model(self):
        """The model the guide was built from; one line of :class:`GuideError` where a pickle dropped it."""
        if self._model is None:
            raise GuideError("this guide was pickled without its model (%s), and it reads the model's plate at "
                             "every call: give it back, guide.model = model" % (self._without_model or "Pyro drops it"))
        return self._model[0]

    @model.setter
    def model(self, model):
        self._model, self._without_model = (model,), None

    def __getstate__(self):
        """Pyro's: the model and the master guide dropped (here on the copy only: Pyro's drops them from the
        guide itself too), but the model kept where the guide needs it (:meth:`keeps_model`) and it pickles."""
        model, master = self._model, self.master
        state = dict(super().__getstate__())
        self._model, self.master = model, master
        if model is not None and self.keeps_model():
            try:
                pickle.dumps(model[0])
                state["_model"] = model
            except Exception as error:  # noqa: BLE001 (whatever makes the model unpicklable: said at the next call)
                state["_without_model"] = "%s: %s" % (type(error).__name__, str(error).splitlines()[0][:120])
        return state

    def keeps_model(self):
        """Whether the guide needs its model after pickling: to read the model's plate at each call (no
        ``create_plates``, or a given plate checked: :meth:`checks_given_plate`) or its scales (a model that scales
        its sites); a family may need it for more (SA-VI, IA-VI: their local ELBO)."""
        return self._user_plates is None or self._scaled_model or self.checks_given_plate()

    def checks_given_plate(self):
        """Whether a data plate given by ``create_plates`` (the guide's or an AutoGuideList's) is checked against
        the model's at each call, whatever Pyro's validation flag: True (a hook: the package's studies, whose plate
        is the model's own by construction, check theirs under validation only and skip the read)."""
        return True

    def _create_plates(self, *args, **kwargs):
        if self.master is not None:  # a part of an AutoGuideList: its plates (Pyro's protocol)
            self.plates, self.call_plate = self.master().plates, None
            self._follow(self.plates[self.plate], self.master().create_plates is None, args, kwargs,  # its own rows
                         "give the AutoGuideList create_plates=a function of the model's arguments returning the "
                         "model's plate")
            return self.plates
        return super()._create_plates(*args, **kwargs)

    def _listed_plates(self, args, kwargs):
        plates = self._user_plates(*args, **kwargs) if self._user_plates is not None else []
        return [plates] if isinstance(plates, pyro.plate) else list(plates)

    def _read_plate(self, args, kwargs):
        """The model's data plate in this call (:func:`~.plates.read_model_plate`)."""
        values = getattr(self, "_prototype_values", None)
        if values is None:  # read once: the prototype's latent values the read replays
            values = self._prototype_values = {name: site["value"]
                                               for name, site in self.prototype_trace.iter_stochastic_nodes()}
        devices = [value.device for value in list(args) + list(kwargs.values()) if torch.is_tensor(value)]
        with outside_the_stream(*devices):  # a site the read does not replay (hidden from it) draws: left unseen
            return read_model_plate(self.model, self.structure, values, args, kwargs)

    def _plates_of_call(self, *args, **kwargs):
        """AutoGuide's ``create_plates``: the user's plates, and the data plate as the model makes it in this
        call where the user gives none (a given one: :meth:`_follow`); the model's scale read with it."""
        plates = self._listed_plates(args, kwargs)
        given = next((p for p in plates if p.name == self.plate), None)
        if given is None:
            self.call_plate = self._read_plate(args, kwargs)
            plates.append(self.call_plate.plate(self.plate))
            self.call_scales = self.call_plate.scales
            if is_validation_enabled():  # a mask all true at the prototype may not be in this call (a host sync)
                check_unmasked(self.call_plate.site, self.call_plate.node, self.local_mask)
        else:
            self.call_plate = None
            self._follow(given, False, args, kwargs, "give create_plates the model's plate, or none (the guide then "
                                                     "reads it)")
        return plates

    def _follow(self, given, always, args, kwargs, fix):
        """A given data plate checked against the model's (its size, dim and datapoints, :meth:`.ModelPlate.check`)
        ``always`` or where :meth:`checks_given_plate`, the model's scales read then and wherever the model scaled
        its latent sites at the prototype; else the guide's sites take their plates' scales alone (no read)."""
        checking, known = always or self.checks_given_plate(), self.known_scales(*args, **kwargs)
        self.call_scales = (1.0, 1.0) if known is None else known
        if checking or (self._scaled_model and known is None):
            read = self._read_plate(args, kwargs)
            if checking:
                read.check(self.plate, given, fix)
            self.call_scales = read.scales

    def known_scales(self, *args, **kwargs):
        """The model's (global, local) scales beyond their plates in a call whose data plate is given, where the
        guide does not read the model (a hook: the package's studies know theirs from their arguments); None:
        read where :meth:`_follow` reads, else 1."""
        return None
