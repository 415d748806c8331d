"""Every env form replays its golden trajectory (see golden.py), and every golden file is accounted for
by the changes log: a re-recording that names no rule change fails here."""

import json

import pytest
from golden import CHANGES, FORMS, GOLDEN, fingerprint, logged

RECORDED = json.loads(GOLDEN.read_text())


def test_every_form_is_recorded():
    assert set(RECORDED) == set(FORMS)


def test_each_golden_file_is_the_one_its_last_logged_change_recorded():
    entries = json.loads(CHANGES.read_text())
    assert all(len(entry["change"].split()) >= 5 and entry["forms"] for entry in entries), \
        "each entry of the changes log names its rule change and the forms it re-recorded"
    fingerprints = logged()
    unaccounted = sorted(form for form, hashes in RECORDED.items() if fingerprints.get(form) != fingerprint(hashes))
    assert not unaccounted, (f"golden trajectories changed with no entry in {CHANGES.name}: {unaccounted}; "
                             "re-record with `tests/golden.py --write --change WHY`")


@pytest.mark.parametrize("form", sorted(FORMS))
def test_form_replays_its_golden_hashes(form):
    hashes = FORMS[form]()
    first = next((i for i, (a, b) in enumerate(zip(hashes, RECORDED[form], strict=False)) if a != b), None)
    assert first is None, f"{form} diverges from its golden trajectory at record {first}"
    assert len(hashes) == len(RECORDED[form])
