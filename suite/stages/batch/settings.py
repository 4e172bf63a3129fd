"""The batch-composition stage's settings: `BatchSettings` (whether the bench runs the stage after
the gate, the trials per mode, the batch sizes and the target prompt), resolved per profile by
`settings(profile)`, the target it names (`batch_prompt`, short-open by default), the preflight
that checks `--batch-prompt` before any runtime starts, and the `--batch-*` options of `suite bench`
with the profiles' own values. The package's `STAGE` is built from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from suite.errors import SuiteError
from suite.stages.base import StageOption
from suite.stages.gate_models import GatePrompt, load_gate_prompts, select_prompts

if TYPE_CHECKING:
    from suite.profiles import Profile

DEFAULT_TARGET = "short-open"


class BatchSettings(BaseModel):
    """The stage's settings: its defaults here, a profile's own values in `STAGE.profiles`."""

    model_config = ConfigDict(extra="forbid")

    composition: bool = False  # run in the bench, after the gate (`--batch-composition`)
    trials: int = Field(default=5, ge=1)  # per mode
    sizes: list[Annotated[int, Field(ge=2)]] = Field(default_factory=lambda: [4, 8, 16], min_length=1)
    prompt: str | None = None  # the target gate prompt (None: short-open, else the profile's first)


def settings(profile: Profile) -> BatchSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    from suite.stages.batch import STAGE  # the package's record, built from this module: read when called

    resolved = STAGE.settings_for(profile)
    assert isinstance(resolved, BatchSettings)
    return resolved


def batch_prompt(profile: Profile) -> GatePrompt:
    """The target: the setting `prompt`, else short-open where it is one of the profile's gate
    prompts, else its first gate prompt (a gate prompt id that does not exist is one line)."""
    wanted = settings(profile).prompt
    if wanted is None:
        ids = profile.gate_prompts
        wanted = DEFAULT_TARGET if ids is None or DEFAULT_TARGET in ids else ids[0]
    return select_prompts([wanted])[0]


def _preflight(own: BaseModel, plans: list[Any]) -> BaseModel:
    """The target prompt named by --batch-prompt, checked whether or not the stage runs."""
    wanted = getattr(own, "prompt", None)
    if wanted is not None:
        known = load_gate_prompts()
        if wanted not in known:
            raise SuiteError(f"--batch-prompt {wanted!r}: not a gate prompt; known: {', '.join(known)}")
    return own


# Its options of `suite bench` (`Stage.options`), each setting one of `BatchSettings`.
OPTIONS: tuple[StageOption, ...] = (
    StageOption("--batch-composition", "composition", "Also send the target prompt inside "
                "batches of other prompts and of shared prefixes (on in the full profile).",
                kind="bool"),
    StageOption("--batch-prompt", "prompt", "The gate prompt the batch-composition stage sends "
                "(default: short-open)."),
    StageOption("--batch-trials", "trials", "Trials per batch-composition mode (default: the "
                "profile's).", kind="int"),
    StageOption("--batch-sizes", "sizes", "Batch sizes the trials cycle through, e.g. 8,16,32 "
                "(default: the profile's).", kind="ints"))
# Per profile, the values that differ from `BatchSettings`' defaults (`Stage.profiles`).
PROFILES: dict[str, dict[str, Any]] = {"quick": {"trials": 2, "sizes": [3, 4]}, "full": {"composition": True, "trials": 8, "sizes": [8, 16, 32]}}
# The profile fields these settings were before they moved into the package (`Stage.profile_keys`).
PROFILE_KEYS: dict[str, str] = {"batch_composition": "composition", "batch_trials": "trials", "batch_sizes": "sizes",
                                "batch_prompt": "prompt"}
