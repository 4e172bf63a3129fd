"""Scoring extracted facts against the gold facts of the extraction documents.

Each gold fact has a type (string, number with an optional unit, date, time, boolean, name with
title). An answer is scored twice:

- **exact**: the answer as written equals the gold value's canonical form ("40 kWh", "2024-03-03",
  "Dr. Ingrid Vasquez-Lund", a JSON boolean);
- **normalised**: the meaning matches: units converted ("5 km" = "5000 m" = "5km"), dates in any
  common form ("3 March 2024" = "2024-03-03"; a numeric date whose day and month could be swapped
  counts only when both readings agree), case, accents and spacing ignored, titles spelled out
  or abbreviated ("Doctor" = "Dr."), "yes"/"no" for booleans.

The normalised verdict is the headline (`correct`, `wrong` or `missing`); `partial` marks answers
that are half right (a name without its title, a month where a day was asked, the right number in
the wrong unit), which are counted wrong. Model output is untrusted data: it is only compared here.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import re
import unicodedata
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

log = logging.getLogger(__name__)

FactType = Literal["string", "number", "date", "time", "boolean", "name"]
Verdict = Literal["correct", "wrong", "missing"]

# Relative tolerance for numbers after unit conversion: absorbs rounding of conversions
# ("13,455 sq ft" for 1,250 m²) but not a changed digit (312 vs 312.2 km is 6e-4 apart).
NUMBER_REL_TOL = 1e-4


class GoldFact(BaseModel):
    """One fact a document part states, with the answer that counts as right."""

    key: str = Field(description="JSON key the model is asked to fill")
    type: FactType = Field(description="how the value is compared")
    ask: str = Field(description="what to extract, in words (shown to the model)")
    value: str | int | float | bool = Field(description="the gold value (dates ISO, times HH:MM)")
    unit: str | None = Field(default=None, description="unit of a number ('km', '%', 'EUR'); none for counts")
    aliases: list[str] = Field(default_factory=list, description="other spellings that count as right (strings)")

    model_config = {"extra": "forbid"}

    @model_validator(mode="after")
    def _check(self) -> GoldFact:
        if self.type == "boolean" and not isinstance(self.value, bool):
            raise ValueError(f"fact {self.key!r}: a boolean fact needs true or false")
        if self.type == "number" and (isinstance(self.value, bool) or not isinstance(self.value, (int, float))):
            raise ValueError(f"fact {self.key!r}: a number fact needs a numeric value")
        if self.type == "number" and self.unit and unit_info(self.unit)[0].startswith("word:"):
            raise ValueError(f"fact {self.key!r}: unknown unit {self.unit!r}")
        if self.type == "date" and not (
            re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", str(self.value)) and parse_date(str(self.value))
        ):
            raise ValueError(f"fact {self.key!r}: date {self.value!r} is not YYYY-MM-DD or YYYY-MM")
        if self.type == "time" and parse_time(str(self.value)) is None:
            raise ValueError(f"fact {self.key!r}: time {self.value!r} is not HH:MM")
        if self.type in ("string", "name", "date", "time") and not isinstance(self.value, str):
            raise ValueError(f"fact {self.key!r}: a {self.type} fact needs a string value")
        if self.unit is not None and self.type != "number":
            raise ValueError(f"fact {self.key!r}: only number facts take a unit")
        return self

    def canonical(self) -> str:
        """The gold value written the way an exact answer must be written."""
        if self.type == "boolean":
            return "true" if self.value else "false"
        if self.type == "number":
            return f"{_format_number(float(self.value))} {self.unit}" if self.unit else _format_number(float(self.value))
        return str(self.value)


class FactScore(BaseModel):
    """The verdict on one extracted fact."""

    key: str = Field(description="the fact's key")
    type: FactType = Field(description="the fact's type")
    gold: str = Field(description="the gold value, canonical form")
    answer: Any = Field(default=None, description="what the model answered (JSON value, untrusted)")
    verdict: Verdict = Field(description="normalised verdict: correct, wrong, or missing (null/absent)")
    exact: bool = Field(description="the answer equals the canonical gold form as written")
    normalised: bool = Field(description="the answer means the gold value (units, date forms, case, titles)")
    partial: bool = Field(default=False, description="half right: counted wrong, but close (see note)")
    note: str | None = Field(default=None, description="why a non-exact answer was judged as it was")


# ---------------------------------------------------------------- numbers and units

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
}
_SCALES = {"thousand": 1e3, "million": 1e6, "mn": 1e6, "billion": 1e9, "bn": 1e9}

_YEAR_S = 365.25 * 86400.0
# unit spelling (lower case, no spaces) -> (dimension, factor to the dimension's base unit)
_UNITS: dict[str, tuple[str, float]] = {}


def _add(dimension: str, factor: float, *names: str) -> None:
    for name in names:
        _UNITS[name] = (dimension, factor)


_add("length", 1e-3, "mm", "millimetre", "millimetres", "millimeter", "millimeters")
_add("length", 1e-2, "cm", "centimetre", "centimetres", "centimeter", "centimeters")
_add("length", 1.0, "m", "metre", "metres", "meter", "meters")
_add("length", 1e3, "km", "kilometre", "kilometres", "kilometer", "kilometers")
_add("length", 1609.344, "mi", "mile", "miles")
_add("length", 0.3048, "ft", "foot", "feet")
_add("area", 1.0, "m²", "m2", "m^2", "sqm", "sq.m", "squaremetre", "squaremetres", "squaremeter", "squaremeters")
_add("area", 1e4, "ha", "hectare", "hectares")
_add("area", 1e6, "km²", "km2", "km^2", "squarekilometre", "squarekilometres", "squarekilometer", "squarekilometers")
_add("area", 0.09290304, "sqft", "sq.ft", "ft²", "ft2", "squarefoot", "squarefeet")
_add("volume", 1.0, "m³", "m3", "m^3", "cubicmetre", "cubicmetres", "cubicmeter", "cubicmeters")
_add("volume", 1e-3, "l", "litre", "litres", "liter", "liters")
_add("volume", 1e-6, "ml", "millilitre", "millilitres", "milliliter", "milliliters")
_add("mass", 1e-6, "mg", "milligram", "milligrams")
_add("mass", 1e-3, "g", "gram", "grams")
_add("mass", 1.0, "kg", "kilogram", "kilograms", "kilo", "kilos")
_add("mass", 1e3, "t", "tonne", "tonnes", "ton", "tons", "metricton", "metrictons")
_add("time", 1e-3, "ms", "millisecond", "milliseconds", "msec")
_add("time", 1.0, "s", "sec", "secs", "second", "seconds")
_add("time", 60.0, "min", "mins", "minute", "minutes")
_add("time", 3600.0, "h", "hr", "hrs", "hour", "hours")
_add("time", 86400.0, "d", "day", "days")
_add("time", 7 * 86400.0, "week", "weeks", "wk", "wks")
_add("time", _YEAR_S / 12.0, "month", "months", "mo", "mos")
_add("time", _YEAR_S, "y", "yr", "yrs", "year", "years")
_add("energy", 1.0, "wh")
_add("energy", 1e3, "kwh")
_add("energy", 1e6, "mwh")
_add("power", 1.0, "w", "watt", "watts")
_add("power", 1e3, "kw", "kilowatt", "kilowatts")
_add("power", 1e6, "mw", "megawatt", "megawatts")
_add("voltage", 1e-3, "mv", "millivolt", "millivolts")
_add("voltage", 1.0, "v", "volt", "volts")
_add("voltage", 1e3, "kv", "kilovolt", "kilovolts")
_add("current", 1e-3, "ma", "milliamp", "milliamps")
_add("current", 1.0, "a", "amp", "amps", "ampere", "amperes")
_add("temperature", 1.0, "°c", "ºc", "c", "degc", "celsius", "degreescelsius", "degreecelsius", "degrees", "°")
_add("fraction", 1.0, "%", "percent", "per cent", "percentage", "pct")
_add("speed", 1 / 3.6, "km/h", "kmh", "kph", "km/hr", "kilometresperhour", "kilometersperhour")
_add("speed", 1.0, "m/s", "metrespersecond", "meterspersecond")
_add("speed", 0.44704, "mph", "milesperhour")
_add("data", 1.0, "b", "byte", "bytes")
_add("data", 1e3, "kb", "kilobyte", "kilobytes")
_add("data", 1e6, "mb", "megabyte", "megabytes")
_add("data", 1e9, "gb", "gigabyte", "gigabytes")
_add("data", 1e12, "tb", "terabyte", "terabytes")
_add("data", 1024.0, "kib")
_add("data", 1024.0**2, "mib")
_add("data", 1024.0**3, "gib")
_add("concentration", 1e-3, "µg/l", "μg/l", "ug/l", "microgramsperlitre", "microgramsperliter")
_add("concentration", 1.0, "mg/l", "mgperlitre", "mgperliter", "milligramsperlitre", "milligramsperliter", "mg/litre")
_add("concentration", 1e3, "g/l", "gperlitre", "gramsperlitre", "gramsperliter")
_add("sound", 1.0, "db(a)", "dba", "db", "decibels", "decibel")
_add("currency:EUR", 1.0, "eur", "€", "euro", "euros")
_add("currency:USD", 1.0, "usd", "$", "us$", "dollar", "dollars", "usdollars")
_add("currency:GBP", 1.0, "gbp", "£", "pound", "pounds", "sterling", "poundssterling")

_CURRENCY_PREFIX = re.compile(r"^(EUR|USD|GBP|US\$|€|\$|£)\s*", re.I)
_NUM = r"[-+−–]?\s*(?:\d{1,3}(?:[,  ]\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?|\.\d+)"
_QUANTITY = re.compile(rf"^(?P<num>{_NUM})\s*(?:(?P<scale>thousand|million|mn|billion|bn)\b)?\s*(?P<unit>.*)$", re.I)


def unit_info(unit: str | None) -> tuple[str, float]:
    """(dimension, factor to the base unit) of a unit spelling; unknown units are 'word:<unit>'."""
    if unit is None:
        return ("count", 1.0)
    u = unicodedata.normalize("NFKC", unit).strip().lower().rstrip(".")
    if u in _UNITS:
        return _UNITS[u]
    squeezed = re.sub(r"\s+", "", u)
    for candidate in (squeezed, squeezed.replace("degrees", "").replace("degree", "") or "degrees"):
        if candidate in _UNITS:
            return _UNITS[candidate]
    parts = u.split()
    for n in range(len(parts) - 1, 0, -1):  # "3.5 metres wide", "9 kW at 7 °C": the leading words
        head = "".join(parts[:n])
        if head in _UNITS:
            return _UNITS[head]
    word = re.sub(r"[^a-z0-9%]+", "", u)
    if word.endswith("s") and len(word) > 3:
        word = word[:-1]
    return (f"word:{word}", 1.0)


def _format_number(x: float) -> str:
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return f"{x:g}"


def _parse_plain_number(text: str) -> float | None:
    t = text.replace("−", "-").replace("–", "-").replace(" ", "").replace(" ", "")
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", t):
        t = t.replace(",", "")
    elif re.fullmatch(r"[-+]?\d+,\d+", t):
        t = t.replace(",", ".")
    try:
        return float(t)
    except ValueError:
        return None


class Quantity(BaseModel):
    """A parsed number with the unit it was written with (None: no unit)."""

    value: float
    unit: str | None = None


def parse_quantity(answer: Any) -> Quantity | None:
    """A number and its unit from a JSON number or a string like '5 km', 'EUR 48,000', '-20 °C'."""
    if isinstance(answer, bool) or answer is None:
        return None
    if isinstance(answer, (int, float)):
        return None if math.isnan(float(answer)) else Quantity(value=float(answer))
    if not isinstance(answer, str):
        return None
    text = unicodedata.normalize("NFKC", answer).strip()
    text = re.sub(r"^(about|around|approximately|approx\.?|roughly|some|up to|at least|over|~)\s+", "", text, flags=re.I)
    unit: str | None = None
    m = _CURRENCY_PREFIX.match(text)
    if m:
        unit = m.group(1)
        text = text[m.end():]
    words = text.split()
    if words and words[0].lower() in _NUMBER_WORDS:
        rest = " ".join(words[1:]).strip()
        return Quantity(value=float(_NUMBER_WORDS[words[0].lower()]), unit=unit or (rest or None))
    q = _QUANTITY.match(text)
    if not q:
        return None
    value = _parse_plain_number(q.group("num"))
    if value is None:
        return None
    if q.group("scale"):
        value *= _SCALES[q.group("scale").lower()]
    rest = q.group("unit").strip().rstrip(".").strip()
    if rest and unit is None:
        unit = rest
    elif rest and unit is not None:
        # "EUR 48,000 per year": the currency is the unit, the rest is context
        pass
    return Quantity(value=value, unit=unit or None)


def _score_number(gold: GoldFact, answer: Any) -> tuple[bool, bool, str | None]:
    """(normalised, partial, note) for a number fact."""
    q = parse_quantity(answer)
    if q is None:
        return False, False, "not a number"
    gold_value = float(gold.value)
    if not gold.unit:
        dim, _ = unit_info(q.unit)
        if q.unit is not None and not dim.startswith("word:"):
            return False, math.isclose(q.value, gold_value, rel_tol=NUMBER_REL_TOL), f"a count, answered in {q.unit!r}"
        ok = math.isclose(q.value, gold_value, rel_tol=NUMBER_REL_TOL, abs_tol=1e-9)
        return ok, False, None if ok else "different number"
    gold_dim, gold_factor = unit_info(gold.unit)
    if q.unit is None:
        ok = math.isclose(q.value, gold_value, rel_tol=NUMBER_REL_TOL, abs_tol=1e-9)
        return ok, False, "number without its unit" if ok else "different number (no unit)"
    dim, factor = unit_info(q.unit)
    if dim != gold_dim:
        same = math.isclose(q.value, gold_value, rel_tol=NUMBER_REL_TOL, abs_tol=1e-9)
        return False, same, f"unit {q.unit!r} is not a {gold_dim} unit"
    ok = math.isclose(q.value * factor, gold_value * gold_factor, rel_tol=NUMBER_REL_TOL, abs_tol=1e-9)
    if ok:
        return True, False, None if q.unit == gold.unit else f"converted from {q.unit!r}"
    if math.isclose(q.value, gold_value, rel_tol=NUMBER_REL_TOL):
        return False, True, f"right number, wrong unit {q.unit!r}"
    return False, False, "different quantity"


# ---------------------------------------------------------------- dates and times

_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
    "oct": 10, "nov": 11, "dec": 12,
}
_WEEKDAYS = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tue|tues|wed|thu|thur|thurs|fri|sat|sun)"
_MONTH_RX = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"

DateValue = tuple[int, int, int | None]  # year, month, day (None: month precision)


def _valid(y: int, m: int, d: int | None) -> bool:
    if not (1 <= m <= 12 and 1000 <= y <= 9999):
        return False
    if d is None:
        return True
    try:
        _dt.date(y, m, d)
    except ValueError:
        return False
    return True


def parse_date(answer: Any) -> set[DateValue]:
    """Every reading of a date answer: one for a clear date, two for 03/04/2024, none if not a date."""
    if not isinstance(answer, str):
        return set()
    t = unicodedata.normalize("NFKC", answer).strip().lower()
    t = re.sub(rf"^{_WEEKDAYS},?\s+", "", t)
    t = re.sub(r"^(on|the|in|at the end of|end of)\s+", "", t).strip().rstrip(".")
    out: set[DateValue] = set()
    m = re.fullmatch(r"(\d{4})[-/.](\d{1,2})(?:[-/.](\d{1,2}))?(?:t[\d:.]+z?)?", t)
    if m:
        y, mo = int(m.group(1)), int(m.group(2))
        d = int(m.group(3)) if m.group(3) else None
        return {(y, mo, d)} if _valid(y, mo, d) else set()
    m = re.fullmatch(rf"(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH_RX},?\s+(?P<year>\d{{4}})", t)
    if m:
        y, mo, d = int(m.group("year")), _MONTHS[m.group("month")], int(m.group("day"))
        return {(y, mo, d)} if _valid(y, mo, d) else set()
    m = re.fullmatch(rf"{_MONTH_RX}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<year>\d{{4}})", t)
    if m:
        y, mo, d = int(m.group("year")), _MONTHS[m.group("month")], int(m.group("day"))
        return {(y, mo, d)} if _valid(y, mo, d) else set()
    m = re.fullmatch(rf"{_MONTH_RX},?\s+(?P<year>\d{{4}})", t)
    if m:
        y, mo = int(m.group("year")), _MONTHS[m.group("month")]
        return {(y, mo, None)} if _valid(y, mo, None) else set()
    m = re.fullmatch(r"(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})", t)
    if m:
        a, b, y = int(m.group(1)), int(m.group(2)), int(m.group(3))
        for mo, d in ((b, a), (a, b)):  # day-first and month-first readings
            if _valid(y, mo, d):
                out.add((y, mo, d))
    return out


def parse_time(answer: Any) -> tuple[int, int] | None:
    """(hour, minute) from '18:30', '18.30', '6:30 pm', '14:12 UTC', '2025-01-21T14:12:00Z'; else None."""
    if not isinstance(answer, str):
        return None
    t = unicodedata.normalize("NFKC", answer).strip().lower()
    iso = re.fullmatch(r"\d{4}-\d{2}-\d{2}[t ](\d{2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?", t)
    if iso:  # an ISO date-time: its time of day
        h, mi = int(iso.group(1)), int(iso.group(2))
        return (h, mi) if h < 24 and mi < 60 else None
    t = re.sub(r"\s*(utc|gmt|cet|cest|z|local time|hours|hrs|h)$", "", t).strip()
    m = re.fullmatch(r"(\d{1,2})(?:[:.h](\d{2}))?\s*(a\.?m\.?|p\.?m\.?)?", t)
    if not m or (m.group(2) is None and m.group(3) is None):
        m2 = re.fullmatch(r"(\d{2})(\d{2})", t)
        if not m2:
            return None
        h, mi = int(m2.group(1)), int(m2.group(2))
    else:
        h, mi = int(m.group(1)), int(m.group(2) or 0)
        ampm = (m.group(3) or "").replace(".", "")
        if ampm == "pm" and h < 12:
            h += 12
        elif ampm == "am" and h == 12:
            h = 0
    return (h, mi) if 0 <= h < 24 and 0 <= mi < 60 else None


# ---------------------------------------------------------------- booleans, text, names

_TRUE = {"true", "yes", "y", "1"}
_FALSE = {"false", "no", "n", "0", "not", "none", "never"}


def parse_bool(answer: Any) -> bool | None:
    """True/False from a JSON boolean, 0/1, or text starting with yes/no/true/false/not."""
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, (int, float)) and answer in (0, 1):
        return bool(answer)
    if not isinstance(answer, str):
        return None
    words = re.findall(r"[a-z0-9]+", answer.lower())
    if not words:
        return None
    if words[0] in _TRUE:
        return True
    if words[0] in _FALSE:
        return False
    return None


def normalise_text(text: str) -> str:
    """Case, accents, punctuation and spacing removed; '&' read as 'and'; a leading article dropped."""
    t = unicodedata.normalize("NFKD", text)
    t = "".join(ch for ch in t if not unicodedata.combining(ch)).casefold()
    t = t.replace("&", " and ")
    t = re.sub(r"[^\w+]+", " ", t).strip()
    t = re.sub(r"^(the|a|an) ", "", t)
    return re.sub(r"\s+", " ", t)


_TITLES = {
    "dr": "dr", "doctor": "dr", "prof": "prof", "professor": "prof", "mr": "mr", "mister": "mr",
    "mrs": "mrs", "missus": "mrs", "ms": "ms", "miss": "miss", "mx": "mx", "sir": "sir", "dame": "dame",
    "cllr": "cllr", "councillor": "cllr", "councilor": "cllr", "ir": "ir", "ing": "ing",
    "mayor": "mayor", "capt": "capt", "captain": "capt", "rev": "rev", "reverend": "rev",
}


def split_name(text: str) -> tuple[list[str], list[str]]:
    """(titles, name words) of a person's name, normalised."""
    words = normalise_text(text).replace("_", " ").split()
    titles: list[str] = []
    while words and words[0] in _TITLES:
        titles.append(_TITLES[words.pop(0)])
    return titles, words


# ---------------------------------------------------------------- the scorer

_MISSING_TEXT = {"", "null", "none", "n/a", "na", "unknown", "not given", "not stated", "not mentioned", "-"}


def is_missing(answer: Any) -> bool:
    """The model gave no value (null, absent, empty, 'unknown')."""
    if answer is None:
        return True
    if isinstance(answer, str) and answer.strip().lower().rstrip(".") in _MISSING_TEXT:
        return True
    return isinstance(answer, (list, dict)) and not answer


def _is_exact(gold: GoldFact, answer: Any) -> bool:
    if gold.type == "boolean":
        return isinstance(answer, bool) and answer == gold.value
    if gold.type == "number" and not gold.unit:
        return not isinstance(answer, bool) and isinstance(answer, (int, float)) and float(answer) == float(gold.value)
    if isinstance(answer, str):
        canonical = gold.canonical()
        if answer.strip() == canonical:
            return True
        return gold.type == "number" and answer.strip() == canonical.replace(" ", "")
    return False


def score_fact(gold: GoldFact, answer: Any) -> FactScore:
    """Score one answer against one gold fact (never raises on odd answers)."""
    base = {"key": gold.key, "type": gold.type, "gold": gold.canonical(), "answer": answer}
    if is_missing(answer):
        return FactScore(**base, verdict="missing", exact=False, normalised=False)
    exact = _is_exact(gold, answer)
    if exact:
        return FactScore(**base, verdict="correct", exact=True, normalised=True)
    ok, partial, note = False, False, None
    if isinstance(answer, (list, dict)):
        note = f"a JSON {type(answer).__name__}, not a value"
    elif gold.type == "boolean":
        b = parse_bool(answer)
        ok = b is not None and b == gold.value
        note = None if ok else ("not a yes/no answer" if b is None else "opposite answer")
    elif gold.type == "number":
        ok, partial, note = _score_number(gold, answer)
    elif gold.type == "date":
        gold_date = next(iter(parse_date(str(gold.value))))
        readings = parse_date(answer) if isinstance(answer, str) else set()
        if not readings:
            note = "not a date"
        elif readings == {gold_date}:
            ok = True
        elif gold_date in readings:
            note = "ambiguous day/month order"
            partial = True
        elif any(r[:2] == gold_date[:2] for r in readings):
            partial = True
            note = "right month, wrong precision or day"
        else:
            note = "different date"
    elif gold.type == "time":
        t = parse_time(answer) if isinstance(answer, str) else None
        ok = t is not None and t == parse_time(str(gold.value))
        note = None if ok else ("not a time" if t is None else "different time")
    elif gold.type == "name":
        text = answer if isinstance(answer, str) else str(answer)
        g_titles, g_words = split_name(str(gold.value))
        a_titles, a_words = split_name(text)
        if a_words == g_words and a_titles == g_titles:
            ok = True
        elif a_words == g_words:
            partial = True
            note = "title missing" if not a_titles else "different title"
        elif g_words and a_words[: len(g_words)] == g_words:
            partial = True
            note = "extra words after the name"
        elif g_words and a_words and a_words[-1:] == g_words[-1:]:
            partial = True
            note = "surname only or different given name"
        else:
            note = "different name"
    else:  # string
        text = answer if isinstance(answer, str) else str(answer)
        wanted = {normalise_text(str(gold.value))} | {normalise_text(a) for a in gold.aliases}
        ok = normalise_text(text) in wanted
        if not ok:
            got = normalise_text(text)
            partial = bool(got) and any(got in w or w in got for w in wanted)
            note = "overlaps the gold text" if partial else "different text"
    return FactScore(**base, verdict="correct" if ok else "wrong", exact=False, normalised=ok,
                     partial=partial and not ok, note=note)


class PartScore(BaseModel):
    """Gold scoring of one answer to one document part (a section of an extraction document)."""

    facts_total: int = Field(description="gold facts in the document part")
    answered: int = Field(description="facts the model gave a value for")
    correct: int = Field(description="facts right after normalisation")
    correct_exact: int = Field(description="facts right as written")
    wrong: int = Field(description="facts answered with a wrong value")
    partial: int = Field(description="wrong facts that were half right")
    missing: int = Field(description="facts left null or absent")
    extra_keys: int = Field(default=0, description="keys the model added that were not asked for")
    precision: float | None = Field(default=None, description="correct / answered (None if nothing answered)")
    recall: float = Field(description="correct / facts_total")
    clean: bool = Field(description="valid JSON and no wrong fact (missing facts allowed: an all-null answer is clean)")
    complete: bool = Field(default=False, description="clean and complete: valid JSON, no wrong and no missing fact")
    facts: list[FactScore] = Field(default_factory=list, description="per-fact verdicts")


def score_part(gold_facts: list[GoldFact], extracted: dict[str, Any] | None) -> PartScore:
    """Score the object a model returned for one document part; None means the JSON was invalid."""
    answers = extracted or {}
    by_lower = {str(k).strip().lower(): v for k, v in answers.items()}
    scores: list[FactScore] = []
    for gold in gold_facts:
        answer = answers[gold.key] if gold.key in answers else by_lower.get(gold.key.lower())
        scores.append(score_fact(gold, answer))
    asked = {g.key.lower() for g in gold_facts}
    extra = sum(1 for k in by_lower if k not in asked)
    correct = sum(s.verdict == "correct" for s in scores)
    wrong = sum(s.verdict == "wrong" for s in scores)
    missing = sum(s.verdict == "missing" for s in scores)
    answered = correct + wrong
    return PartScore(
        facts_total=len(gold_facts),
        answered=answered,
        correct=correct,
        correct_exact=sum(s.exact for s in scores),
        wrong=wrong,
        partial=sum(s.partial for s in scores),
        missing=missing,
        extra_keys=extra,
        precision=correct / answered if answered else None,
        recall=correct / len(gold_facts) if gold_facts else 0.0,
        clean=extracted is not None and wrong == 0,
        complete=extracted is not None and bool(gold_facts) and wrong == 0 and missing == 0,
        facts=scores,
    )
