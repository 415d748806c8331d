"""Every env form replays the trajectories recorded before the batch-engine refactor (see golden.py)."""

import json

import pytest
from golden import FORMS, GOLDEN

RECORDED = json.loads(GOLDEN.read_text())


def test_every_form_is_recorded():
    assert set(RECORDED) == set(FORMS)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_form_replays_its_golden_hashes(form):
    hashes = FORMS[form]()
    first = next((i for i, (a, b) in enumerate(zip(hashes, RECORDED[form], strict=False)) if a != b), None)
    assert first is None, f"{form} diverges from its golden trajectory at record {first}"
    assert len(hashes) == len(RECORDED[form])
