"""The series the loss detectors read where a run stores no ``loss`` (issue #32, round 22: f28c).

The detectors (spikes, early rises, climbs, non-finite losses) read the run's ``loss``; the importer names
one where a log prints none (``ingest.formats.run_loss``). A run it named none for still has an objective
the optimizer stepped on when it is a GAN's: the generator's loss beside a discriminator's
(:func:`~stab_core.adversarial.gan_generator`, whatever split prefix the trainer gave them:
``train_gen_loss``, ``train_disc_loss``). A generator loss NaN from the first row, or climbing 4.6x from it,
is the run's failure; left unread, the run would show nothing. So such a run is analysed with that series
as its ``loss`` (the series keeps its own name too). Pure: a view in, a view out.
"""

from __future__ import annotations

from dataclasses import replace

from stab_core.adversarial import gan_generator
from stab_core.runview import RunView


def with_objective(view: RunView) -> RunView:
    """``view`` with its GAN generator's loss also as its ``loss`` where it stores no ``loss`` (module
    docstring); ``view`` itself otherwise."""
    if "loss" in view.series:
        return view
    generator = gan_generator(view.series)
    if generator is None:
        return view
    return replace(view, series={**view.series, "loss": view.series[generator]})
