"""The control matrix's settings: `ControlMatrixSettings` (whether the bench runs the matrix by itself
when the gate finds more than one answer, and how controls tried inside one launch are tested), a
profile's values of them (`settings`), the command line's `--controls` and
`--auto-controls/--no-auto-controls` (`OPTIONS`) with the profiles' own values (`PROFILES`), and
`preflight`, which checks the control names asked for against every arm's runtime before anything
starts (`LORA`, the name of the LoRA rows, is one of them where the runtime serves adapters). The
package's `STAGE` is built from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.levels import IN_LAUNCH_ALPHA
from suite.analysis.sequential import EFFECT, MAX_PAIRS
from suite.errors import SuiteError
from suite.stages.base import StageOption

if TYPE_CHECKING:
    from suite.profiles import Profile

# The name `--controls` takes for LoRA's rows (base and adapter), beside the runtime's controls.
LORA = "lora"


class ControlMatrixSettings(BaseModel):
    """The stage's settings (`--auto-controls/--no-auto-controls`)."""

    model_config = ConfigDict(extra="forbid")

    # When the gate finds more than one answer, run the arm's control matrix one control at a time
    # (the process of elimination) after the other stages.
    auto: bool = True
    # Controls that can be applied per request are tried inside one launch, in pairs with and
    # without, stopped by an exact sequential test (False: each in launches of its own, as before).
    in_launch: bool = True
    # The level of those rows before the matrix's correction: requests are cheap, so they ask for
    # more than the launch rows' 5 %.
    in_launch_alpha: float = Field(default=IN_LAUNCH_ALPHA, gt=0.0, lt=0.5)
    max_pairs: int = Field(default=MAX_PAIRS, ge=4, le=200)  # pairs a prompt may take before it stops undecided
    effect: float = Field(default=EFFECT, gt=0.0, le=1.0)  # the share of pairs an undecided row rules out
    # Where no control of one kernel part restores one answer, try the smallest combinations of the
    # parts that moved the count (pairs, at most three rows): `combinations_to_try`.
    combinations: bool = True
    # The rows asked for with --controls ('all' or control names; None: none asked): checked against
    # every arm's runtime by `preflight`; what the run did is in its invocation, not its settings.
    names: list[str] | None = Field(default=None, exclude=True)


def preflight(own: BaseModel, plans: list[Any]) -> BaseModel:
    """`--controls` names checked against every arm's runtime before anything starts: an unknown
    one is one line naming the option, the runtime and the controls it has."""
    for name in getattr(own, "names", None) or []:
        if name == "all":
            continue
        for plan in plans:
            runtime = plan.runtime
            try:
                if name == LORA:
                    if not runtime.capabilities.lora:
                        raise SuiteError(f"runtime {runtime.name!r} does not serve LoRA adapters")
                else:
                    runtime.control(name)
            except SuiteError as exc:
                raise SuiteError(f"--controls {name}: {exc} (arm {plan.arm_name})") from None
    return own


def settings(profile: Profile) -> ControlMatrixSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    from suite.stages.controls import STAGE  # the package's record, made from this module's settings

    return cast(ControlMatrixSettings, STAGE.settings_for(profile))


OPTIONS: tuple[StageOption, ...] = (
    StageOption("--controls", "names", "'all' or control names: run the control matrix after "
                "the gate, whatever the gate found.", kind="strs"),
    StageOption("--auto-controls/--no-auto-controls", "auto", "Run the control matrix when the "
                "gate finds more than one answer (default: the profile's).", kind="bool"))
# The profiles' own values (the quick profile never adds the matrix by itself) and the profile keys
# that set them.
PROFILES: dict[str, dict[str, Any]] = {"quick": {"auto": False}}
PROFILE_KEYS: dict[str, str] = {"auto_controls": "auto"}
