"""The comparison the other tests rely on rejects wrong answers."""

import pytest
import torch
from conftest import assert_matches


def test_rejects_a_wrong_value():
    want = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(AssertionError):
        assert_matches(want + 1e-3, want)


def test_rejects_a_wrong_dtype_shape_or_structure():
    want = torch.zeros(2, 3)
    with pytest.raises(AssertionError):
        assert_matches(want.double(), want)
    with pytest.raises(AssertionError):
        assert_matches(want.reshape(3, 2), want)
    with pytest.raises(AssertionError):
        assert_matches((want,), (want, want))
    with pytest.raises(AssertionError):
        assert_matches(torch.tensor([1, 2]), torch.tensor([1, 3]))


def test_accepts_rounding_within_tolerance():
    want = torch.tensor([1.0, 2.0, 3.0])
    assert_matches(want * (1 + 1e-6), want)
