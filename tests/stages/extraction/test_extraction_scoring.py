"""Gold scoring: exact and normalised matches for units, dates, names, booleans, text."""

import pytest

from suite.analysis.scoring import GoldFact, parse_date, parse_quantity, parse_time, score_fact, score_part


def fact(type_, value, unit=None, aliases=(), key="k"):
    return GoldFact(key=key, type=type_, ask="x", value=value, unit=unit, aliases=list(aliases))


@pytest.mark.parametrize(
    ("gold", "answer", "exact", "normalised"),
    [
        (fact("number", 5, "km"), "5 km", True, True),
        (fact("number", 5, "km"), "5km", True, True),
        (fact("number", 5, "km"), "5000 m", False, True),
        (fact("number", 5, "km"), "5,000 metres", False, True),
        (fact("number", 5, "km"), "5 kilometres", False, True),
        (fact("number", 5, "km"), 5, False, True),
        (fact("number", 5, "km"), "5 mi", False, False),
        (fact("number", 5, "km"), "50 km", False, False),
        (fact("number", 1100, "mm"), "1.1 m", False, True),
        (fact("number", 1250, "m²"), "13,455 sq ft", False, True),
        (fact("number", 312, "ha"), "3.12 km²", False, True),
        (fact("number", 48000, "EUR"), "EUR 48,000", False, True),
        (fact("number", 48000, "EUR"), "€48,000", False, True),
        (fact("number", 48000, "EUR"), "48 000 euros", False, True),
        (fact("number", 48000, "EUR"), "USD 48,000", False, False),
        (fact("number", 3200000, "GBP"), "GBP 3.2 million", False, True),
        (fact("number", 3200000, "GBP"), "£3.2 million", False, True),
        (fact("number", -20, "°C"), "-20 °C", True, True),
        (fact("number", -20, "°C"), "−20°C", False, True),
        (fact("number", -20, "°C"), "-20 degrees Celsius", False, True),
        (fact("number", -20, "°C"), "20 °C", False, False),
        (fact("number", 36.5, "%"), "36.5%", True, True),
        (fact("number", 36.5, "%"), "36.5 percent", False, True),
        (fact("number", 12, "months"), "1 year", False, True),
        (fact("number", 90, "min"), "1.5 hours", False, True),
        (fact("number", 900, "MB"), "0.9 GB", False, True),
        (fact("number", 7.5, "t"), "7500 kg", False, True),
        (fact("number", 50, "km/h"), "50 kph", False, True),
        (fact("number", 2.1, "mg/L"), "2.1 mg per litre", False, True),
        (fact("number", 3.5, "m"), "3.5 metres wide", False, True),
        (fact("number", 9, "kW"), "9 kW at 7 °C", False, True),
        (fact("number", 12), 12, True, True),
        (fact("number", 12), "12", False, True),
        (fact("number", 12), "twelve cycles", False, True),
        (fact("number", 12), "12 %", False, False),
        (fact("number", 1860), "1,860", False, True),
        (fact("number", 4.6), 4.6, True, True),
    ],
)
def test_numbers_and_units(gold, answer, exact, normalised):
    got = score_fact(gold, answer)
    assert (got.exact, got.normalised) == (exact, normalised), got.note
    assert got.verdict == ("correct" if normalised else "wrong")


def test_right_number_in_wrong_unit_is_half_right():
    got = score_fact(fact("number", 140, "mV"), "140 V")
    assert got.verdict == "wrong" and got.partial and "wrong unit" in got.note
    got = score_fact(fact("number", 9, "kW"), "9 kWh")
    assert got.verdict == "wrong" and got.partial


@pytest.mark.parametrize(
    ("answer", "exact", "normalised", "partial"),
    [
        ("2024-03-03", True, True, False),
        ("3 March 2024", False, True, False),
        ("3rd March 2024", False, True, False),
        ("March 3, 2024", False, True, False),
        ("Sunday 3 March 2024", False, True, False),
        ("03/03/2024", False, True, False),  # both readings agree
        ("2024/03/03", False, True, False),
        ("2024-03", False, False, True),  # month only: half right
        ("4 March 2024", False, False, True),
        ("2023-03-03", False, False, False),
        ("soon", False, False, False),
    ],
)
def test_dates(answer, exact, normalised, partial):
    got = score_fact(fact("date", "2024-03-03"), answer)
    assert (got.exact, got.normalised, got.partial) == (exact, normalised, partial), got.note


def test_ambiguous_numeric_date_is_not_counted_right():
    got = score_fact(fact("date", "2024-04-06"), "04/06/2024")
    assert got.verdict == "wrong" and got.partial and "ambiguous" in got.note
    assert score_fact(fact("date", "2024-04-06"), "06.04.2024").verdict == "wrong"
    assert parse_date("13/04/2024") == {(2024, 4, 13)}  # only one valid reading


def test_month_precision_dates():
    gold = fact("date", "2024-07")
    assert score_fact(gold, "July 2024").normalised
    assert score_fact(gold, "2024-07").exact
    half = score_fact(gold, "2024-07-01")
    assert half.verdict == "wrong" and half.partial


def test_times():
    gold = fact("time", "18:30")
    assert score_fact(gold, "18:30").exact
    for answer in ("6:30 pm", "6.30 p.m.", "18.30", "18:30 UTC", "1830", "2023-11-14T18:30:00Z"):
        assert score_fact(gold, answer).normalised, answer
    assert not score_fact(gold, "8:30").normalised
    assert parse_time("12 am") == (0, 0)
    assert parse_time("25:00") is None
    assert parse_time("2023-11-14T18:31:00Z") == (18, 31)


@pytest.mark.parametrize(
    ("answer", "exact", "normalised"),
    [
        (False, True, True),
        ("false", False, True),
        ("No", False, True),
        ("no, it was not opened", False, True),
        (0, False, True),
        (True, False, False),
        ("yes", False, False),
        ("maybe", False, False),
    ],
)
def test_booleans_and_negations(answer, exact, normalised):
    got = score_fact(fact("boolean", False), answer)
    assert (got.exact, got.normalised) == (exact, normalised)


def test_names_with_titles():
    gold = fact("name", "Dr. Ingrid Vasquez-Lund")
    assert score_fact(gold, "Dr. Ingrid Vasquez-Lund").exact
    assert score_fact(gold, "Doctor Ingrid Vasquez-Lund").normalised
    assert score_fact(gold, "dr ingrid  vasquez-lund").normalised
    no_title = score_fact(gold, "Ingrid Vasquez-Lund")
    assert no_title.verdict == "wrong" and no_title.partial and no_title.note == "title missing"
    wrong_title = score_fact(gold, "Prof. Ingrid Vasquez-Lund")
    assert wrong_title.verdict == "wrong" and wrong_title.note == "different title"
    assert score_fact(gold, "Dr. Ingrid Vasquez-Lund, principal test engineer").partial
    assert score_fact(gold, "Dr. Tomasz Brandt").verdict == "wrong"
    accented = fact("name", "Ing. Radka Šimková")
    assert score_fact(accented, "Ing. Radka Simkova").normalised
    assert not score_fact(accented, "Ing. Radka Simkova").exact
    assert score_fact(fact("name", "Councillor Maeve O'Donnell"), "Cllr Maeve O'Donnell").normalised


def test_strings_case_whitespace_and_aliases():
    gold = fact("string", "Harrow & Lyle Solicitors", aliases=["Harrow & Lyle"])
    assert score_fact(gold, "Harrow & Lyle Solicitors").exact
    assert score_fact(gold, "harrow and lyle solicitors").normalised
    assert score_fact(gold, "  Harrow  &  Lyle ").normalised
    half = score_fact(gold, "Lyle")
    assert half.verdict == "wrong" and half.partial
    assert score_fact(fact("string", "A+++"), "A+++").exact
    assert not score_fact(fact("string", "A+++"), "A++").normalised
    assert score_fact(fact("string", "Glasmoor Trust"), "The Glasmoor Trust").normalised


@pytest.mark.parametrize("answer", [None, "", "null", "N/A", "unknown", [], {}])
def test_missing_answers(answer):
    got = score_fact(fact("number", 5, "km"), answer)
    assert got.verdict == "missing" and not got.normalised


def test_odd_answers_never_raise():
    gold = fact("number", 5, "km")
    for answer in ([1, 2], {"value": 5}, float("nan"), "∞ km", "5 5 5", "km"):
        assert score_fact(gold, answer).verdict == "wrong"


def test_section_scoring():
    gold = [
        fact("number", 312, "km", key="range"),
        fact("date", "2024-03-03", key="start"),
        fact("boolean", False, key="opened"),
        fact("name", "Dr. Ingrid Vasquez-Lund", key="lead"),
    ]
    s = score_part(gold, {"range": "312 km", "START": "3 March 2024", "opened": True, "lead": None, "extra": 1})
    assert (s.correct, s.correct_exact, s.wrong, s.missing, s.extra_keys) == (2, 1, 1, 1, 1)
    assert s.precision == pytest.approx(2 / 3) and s.recall == pytest.approx(0.5)
    assert not s.clean
    clean = score_part(gold, {"range": 312, "start": None})
    assert clean.clean and clean.precision == 1.0 and clean.recall == 0.25
    invalid = score_part(gold, None)
    assert not invalid.clean and invalid.missing == 4 and invalid.precision is None


def test_gold_fact_validation():
    with pytest.raises(ValueError, match="unknown unit"):
        fact("number", 5, "furlongs-ish")
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        fact("date", "3 March 2024")
    with pytest.raises(ValueError, match="boolean"):
        fact("boolean", "no")
    assert parse_quantity("about 40 kWh").unit == "kWh"


def test_empty_or_all_null_answer_is_clean_but_not_complete():
    gold = [fact("number", 312, "km", key="range"), fact("boolean", False, key="opened")]
    for empty in ({}, {"range": None, "opened": None}, {"range": "unknown", "opened": ""}):
        s = score_part(gold, empty)
        assert s.clean and not s.complete and s.recall == 0.0, empty
    partial = score_part(gold, {"range": 312, "opened": None})
    assert partial.clean and not partial.complete
    full = score_part(gold, {"range": "312 km", "opened": False})
    assert full.clean and full.complete
    one_wrong = score_part(gold, {"range": "312 km", "opened": True})
    assert not one_wrong.clean and not one_wrong.complete
    invalid = score_part(gold, None)
    assert not invalid.clean and not invalid.complete
    assert not score_part([], {}).complete  # nothing asked: not "complete" by default
