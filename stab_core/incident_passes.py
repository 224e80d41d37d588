"""The passes over a run's grouped incidents that read more than the loss: each adds or reframes
incidents from series beside it (issue #32).

In order: a loss rise that fell back by most of it is no divergence (:mod:`stab_core.fell_back`); a GAN
generator's drift beside a discriminator that holds is no divergence
(:mod:`stab_core.adversarial`); a generator climbing while its discriminator collapses is one
(:mod:`stab_core.discriminator_wins`); a side loss (KL, aux) that explodes and stays is a divergence of its
own (:mod:`stab_core.side_losses`); an RL run's return is its headline, its lasting falls are incidents and a
TD loss's jitter is not (:mod:`stab_core.return_falls`); an RL fine-tune's reward stuck at one lower value to the
end is a collapse (:mod:`stab_core.reward_collapse`); a grad-norm outlier the loss never rose
above its own scatter for is a blip (:mod:`stab_core.unfelt_outliers`); on a loss noisy throughout, an
excursion inside its own scatter is a blip (:mod:`stab_core.noisy_series`), while a rise that holds
several rows there is shown (:mod:`stab_core.lasting_rises`); a grad norm that held 4x its
level for 16 samples is a spike whatever the loss did (:mod:`stab_core.grad_norm_surges`), and so is one held two
logged steps in a short run's first samples (:mod:`stab_core.short_run_surges`); so is a loss
non-finite on consecutive logged samples (:mod:`stab_core.nonfinite_episodes`), and the first non-finite grad norm
beside a loss printed 0 and a last skipped update (:mod:`stab_core.overflow_incidents`); a rise from a level of a
few samples that the loss then held is no divergence (:mod:`stab_core.short_levels`); last, a loss excursion
that starts while an earlier loss incident is still out is part of it (:mod:`stab_core.within_incidents`); and a
signed objective (a PPO loss) the loss detectors skip has its spread's spikes added (:mod:`stab_core.signed_spikes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stab_core.adversarial import adversarial_drifts
from stab_core.discriminator_wins import discriminator_wins
from stab_core.fell_back import fell_back_rises
from stab_core.grad_norm_surges import lasting_surges
from stab_core.incidents import Incident
from stab_core.lasting_rises import noisy_lasting_rises
from stab_core.noisy_series import ordinary_excursions
from stab_core.nonfinite_episodes import nonfinite_episodes
from stab_core.overflow_incidents import overflow_severities
from stab_core.return_falls import return_led
from stab_core.reward_collapse import reward_collapses
from stab_core.runview import Series
from stab_core.short_levels import short_level_steps
from stab_core.short_run_surges import held_short_surges
from stab_core.side_losses import exploded_terms
from stab_core.signed_spikes import signed_incidents
from stab_core.unfelt_outliers import unfelt_grad_norm_outliers
from stab_core.within_incidents import within_earlier


def after_grouping(series: Mapping[str, Series], incidents: Sequence[Incident]) -> list[Incident]:
    """``incidents`` after every pass that reads the series beside the loss, in the order above."""
    adversarial = discriminator_wins(series, adversarial_drifts(series, fell_back_rises(series, incidents)))
    passed = unfelt_grad_norm_outliers(
        series, reward_collapses(series, return_led(series, exploded_terms(series, adversarial)))
    )
    shown = noisy_lasting_rises(series, ordinary_excursions(series, passed))
    severe = overflow_severities(
        series, nonfinite_episodes(series, held_short_surges(series, lasting_surges(series, shown)))
    )
    return signed_incidents(series, within_earlier(short_level_steps(series, severe)))
