"""What a bench is asked to do, as one frozen typed object: `BenchRequest`.

The command line (`suite bench`, `suite gate`, `suite study sessions`) builds it once with
`BenchRequest.build`, which checks every value that can be checked without reading a file or
asking a server: the profile, the stages, the gate's request count, each stage's own settings
(typed: a mapping of stage name to that stage's settings object, resolved for the profile with
the options given), the tags. Both drivers take it whole: the local one (`run_bench`) and the Ray
one (`suite.distributed.run_bench_ray`), which sends it to its nodes as JSON
(`model_dump_json`); a node rebuilds the typed object with `model_validate_json`, stage settings
included. What needs files or servers (prompts, documents, the judge's endpoint, the control
names against each runtime) is checked by the shared start-up (`suite.bench.startup.prepare`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from suite import __version__ as SUITE_VERSION
from suite.errors import SuiteError
from suite.profiles import Profile, get_profile
from suite.stages import ORDER, STAGES


def _first_error(exc: ValidationError) -> tuple[str, Any, str]:
    err = exc.errors()[0]
    return ".".join(str(x) for x in err["loc"]), err.get("input"), str(err["msg"])


class BenchRequest(BaseModel):
    """One bench, as asked: which model and arms, where and how they run, every stage's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=False)

    model: str | None = None  # the card (None with `url`: the synthetic card's name is "external")
    arms: tuple[str, ...] | None = None  # None: every arm of the card
    launcher: str = "auto"
    # the profile, with the command line's own values (`gate_requests`) applied; its
    # `stage_settings` are the resolved `settings` as the run record keeps them
    profile: Profile = Field(default_factory=lambda: get_profile("standard"))
    stages: tuple[str, ...] = tuple(ORDER)
    # every stage with settings of its own: its typed settings object, resolved for the profile
    settings: dict[str, BaseModel] = Field(default_factory=dict)
    results: Path = Path("results")
    resume: bool = False
    url: str | None = None  # a server the suite did not start
    served_model: str | None = None
    tokenizer: str | None = None
    retry_refused: bool = False  # start a determinism mode this machine saw refused (suite.refusals)
    tags: dict[str, str] = Field(default_factory=dict)
    site: bool = False  # the site is built from the results as the bench goes and at its end (the command line's)
    command: tuple[str, ...] | None = None  # the command line, secrets redacted (the run record keeps it)
    suite_version: str = SUITE_VERSION  # a node on another version refuses the task

    @field_validator("settings", mode="before")
    @classmethod
    def _typed_settings(cls, value: Any) -> Any:
        """Each stage's settings as that stage's model (from JSON: a dict per stage)."""
        if not isinstance(value, dict):
            return value
        out: dict[str, BaseModel] = {}
        for name, given in value.items():
            stage = STAGES.get(name)
            if stage is None or stage.settings is None:
                raise ValueError(f"stage {name!r} has no settings of its own")
            out[name] = given if isinstance(given, stage.settings) else stage.settings.model_validate(given)
        return out

    @field_serializer("settings")
    def _settings_json(self, value: dict[str, BaseModel]) -> dict[str, Any]:
        """Each stage's settings whole, also the fields a run record leaves out (`exclude`: the
        judge's address, the control names), so a node gets what the driver was asked."""
        out: dict[str, Any] = {}
        for name, s in value.items():
            data = s.model_dump(mode="json")
            for key, f in type(s).model_fields.items():
                if f.exclude:
                    data[key] = _jsonable(getattr(s, key))
            out[name] = data
        return out

    # -- reading it ---------------------------------------------------------------------------------

    def settings_of(self, stage: str) -> BaseModel | None:
        """A stage's typed settings (None for a stage without settings of its own)."""
        return self.settings.get(stage)

    @property
    def stage_list(self) -> list[str]:
        return list(self.stages)

    @property
    def arm_list(self) -> list[str] | None:
        return list(self.arms) if self.arms is not None else None

    def with_settings(self, stage: str, settings: BaseModel) -> BenchRequest:
        """This request with one stage's settings replaced (a preflight completed them)."""
        new = {**self.settings, stage: settings}
        return self.model_copy(update={"settings": new, "profile": _recorded(self.profile, new)})

    # -- building it --------------------------------------------------------------------------------

    @classmethod
    def build(cls, *, model: str | None = None, arms: list[str] | tuple[str, ...] | None = None,
              launcher: str = "auto", profile: str = "standard", stages: list[str] | tuple[str, ...] | None = None,
              gate_requests: int | None = None, stage_values: dict[str, dict[str, Any]] | None = None,
              options: dict[str, dict[str, str]] | None = None, **fields: Any) -> BenchRequest:
        """The request, every value checked: a bad one is one SuiteError naming it. `stage_values`:
        per stage, the settings the command line gives (None values left out); `options`: per
        stage and setting, the option that gave it (named by an error)."""
        unknown = [s for s in stages or () if s not in STAGES]
        if unknown:
            raise SuiteError(f"--stages {unknown[0]}: not a stage; known: {', '.join(STAGES)}")
        base = get_profile(profile)
        if gate_requests is not None:
            if gate_requests < 2:
                raise SuiteError(f"--gate-requests {gate_requests}: the gate needs at least 2 requests per prompt")
            base = base.model_copy(update={"gate_requests": gate_requests})
        given = {k: v for k, v in (stage_values or {}).items() if v}
        for name, values in given.items():
            stage = STAGES.get(name)
            if stage is None or stage.settings is None:
                raise SuiteError(f"stage {name!r} has no settings of its own")
            try:
                stage.settings.model_validate(values)
            except ValidationError as exc:
                key, _, _ = _first_error(exc)
                key = key.split(".")[0]
                option = (options or {}).get(name, {}).get(key)
                if option is None:
                    raise SuiteError(f"stage {name!r}: setting {key} = {values.get(key)!r}: "
                                     f"{exc.errors()[0]['msg']}") from None
                value = values.get(key)
                shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)  # as typed
                raise SuiteError(f"{option} {shown!r}: {_friendly(exc)}") from None
        with_given = base.model_copy(update={"stage_settings": given})
        settings: dict[str, BaseModel] = {}
        for name, stage in STAGES.items():
            resolved = stage.settings_for(with_given)  # the profile's values, then the run's own
            if resolved is not None:
                settings[name] = resolved
        if fields.get("results") is None:
            from suite.paths import results_dir

            fields["results"] = results_dir()
        _check_results_folder(Path(fields["results"]))
        if fields.get("command") is not None:
            fields["command"] = tuple(fields["command"])
        return cls(model=model, arms=tuple(arms) if arms else None, launcher=launcher,
                   profile=_recorded(base, settings), stages=tuple(stages or ORDER), settings=settings,
                   **{k: v for k, v in fields.items() if v is not None})


def _check_results_folder(path: Path) -> None:
    """The results folder, checked before anything starts: a folder, or a path whose nearest
    existing parent is a folder this user can write to (the bench makes it); else one line."""
    import os

    if path.exists() and not path.is_dir():
        raise SuiteError(f"--results {path}: not a folder (a file is there)")
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise SuiteError(f"--results {path}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SuiteError(f"--results {path}: {probe} is not writable")


def _recorded(profile: Profile, settings: dict[str, BaseModel]) -> Profile:
    """The profile as the run record keeps it: its `stage_settings` are the resolved settings."""
    return profile.model_copy(update={"stage_settings": {n: s.model_dump(mode="json") for n, s in settings.items()}})


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, tuple):
        return list(value)
    return value


def _friendly(exc: ValidationError) -> str:
    """What is wrong with a value, in the command line's words ("must be 2 or more")."""
    err = exc.errors()[0]
    kind, ctx, msg = err.get("type", ""), err.get("ctx") or {}, str(err.get("msg", ""))
    if kind in ("int_parsing", "int_from_float"):
        return "not a whole number"
    if kind == "bool_parsing":
        return "not true or false"
    bounds = {"greater_than_equal": ("ge", "{} or more"), "greater_than": ("gt", "more than {}"),
              "less_than_equal": ("le", "{} or less"), "less_than": ("lt", "less than {}")}
    if kind in bounds:
        key, words = bounds[kind]
        return "must be " + words.format(ctx.get(key))
    msg = msg.removeprefix("Value error, ").rstrip(".")
    return msg[:1].lower() + msg[1:]
