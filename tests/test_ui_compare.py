"""Compare mode's one-line summary of where the methods' answers differ."""

from videoqa.ui.present import answers_differ


def test_same_answers_are_said_to_agree():
    assert answers_differ({"none": "right", "fastv": " right ", "random": "right"}) == "All 3 give the same answer."


def test_different_answers_list_the_methods_behind_each():
    line = answers_differ({"none": "right", "fastv": "right", "random": "left", "fastvid": "up"})
    assert line == "Answers differ — “right”: none, fastv · “left”: random · “up”: fastvid"


def test_long_answers_are_shortened():
    line = answers_differ({"none": "a" * 100, "fastv": "b"}, width=10)
    assert "“aaaaaaaaa…”: none" in line and len(line) < 60
