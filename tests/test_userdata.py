"""Users' own data (esa/_data.py): CSV columns and Python arrays mapped onto a protocol's input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import esa
from esa import DataError, prepare_values, read_column
from protocols import InputKind, ProtocolSpec, build_protocol


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "users.csv"
    path.write_text(text)
    return path


def test_categories_become_bins_in_sorted_order_and_the_mapping_is_stated(tmp_path: Path) -> None:
    path = _csv(tmp_path, "id,browser\n1,firefox\n2,chrome\n3,safari\n4,chrome\n")
    data = prepare_values(read_column(path, "browser"), InputKind.CATEGORICAL, source="f:browser")
    assert data.categories == ("chrome", "firefox", "safari")
    assert data.values.tolist() == [1, 0, 2, 0]
    assert data.to_json()["categories"] == ["chrome", "firefox", "safari"]
    protocol = build_protocol("hist_kr", ProtocolSpec(epsilon=1.0, delta=1e-6, n=4, domain=3))
    assert protocol.validate_values(data.values).tolist() == [1, 0, 2, 0]


def test_numeric_labels_sort_as_numbers_and_explicit_categories_keep_their_order() -> None:
    data = prepare_values(["10", "9", "100", "9"], InputKind.CATEGORICAL)
    assert data.categories == ("9", "10", "100")
    fixed = prepare_values(["b", "a"], InputKind.CATEGORICAL, categories=["b", "a", "c"])
    assert fixed.values.tolist() == [0, 1]
    assert fixed.domain == 3
    with pytest.raises(DataError, match="'z' at index 1 is not a known category"):
        prepare_values(["a", "z"], InputKind.CATEGORICAL, categories=["a", "b"])


def test_more_categories_than_bins_is_refused() -> None:
    with pytest.raises(DataError, match="3 categories do not fit the protocol's domain of 2"):
        prepare_values(["a", "b", "c"], InputKind.CATEGORICAL, domain=2)


def test_a_missing_value_names_its_row_and_line(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x\n0.5\n0.25\nNA\n\n")  # NA is missing, so is a blank line
    column = read_column(path, "x")
    assert column.tolist() == ["0.5", "0.25", "NA", ""]
    with pytest.raises(DataError, match=r"missing value at row 3 \(line 4\)"):
        prepare_values(column, InputKind.REAL01, source=f"{path}:x")
    with pytest.raises(DataError, match=r"missing value at row 4 \(line 5\)"):
        prepare_values(["0.5", "0.25", "0.1", ""], InputKind.REAL01, source="f:x")
    with pytest.raises(DataError, match="missing value at index 1"):
        prepare_values([0.1, float("nan")], InputKind.REAL01)
    with pytest.raises(DataError, match="missing value at index 0"):
        prepare_values([None, "a"], InputKind.CATEGORICAL)


def test_reals_are_rescaled_then_clipped_and_counted_or_refused() -> None:
    data = prepare_values(["0", "50", "100", "150", "-10"], InputKind.REAL01, value_range=(0, 100))
    assert data.values.tolist() == [0.0, 0.5, 1.0, 1.0, 0.0]
    assert data.clipped == 2
    assert data.to_json()["value_range"] == [0.0, 100.0]
    pm1 = prepare_values([0.0, 5.0, 10.0], InputKind.REAL_PM1, value_range=(0, 10))
    assert pm1.values.tolist() == [-1.0, 0.0, 1.0]
    assert pm1.clipped == 0
    with pytest.raises(DataError, match=r"150 at index 1 lies outside the range \[0.0, 100.0\]"):
        prepare_values([50, 150], InputKind.REAL01, value_range=(0, 100), out_of_range="refuse")
    with pytest.raises(DataError, match="'abc' at index 0 is not a number"):
        prepare_values(["abc"], InputKind.REAL01)
    with pytest.raises(DataError, match="lo < hi"):
        prepare_values([1.0], InputKind.REAL01, value_range=(1, 1))


def test_bits_take_the_usual_spellings() -> None:
    data = prepare_values(["1", "0", "TRUE", "no", "Yes", 1, False], InputKind.BINARY)
    assert data.values.tolist() == [1, 0, 1, 0, 1, 1, 0]
    with pytest.raises(DataError, match="'maybe' at index 0 is not a bit"):
        prepare_values(["maybe"], InputKind.BINARY)


def test_sets_are_semicolon_lists_of_labels() -> None:
    data = prepare_values(["a;c", "b", "c; a"], InputKind.SET)
    assert data.categories == ("a", "b", "c")
    assert data.values.tolist() == [[True, False, True], [False, True, False], [True, False, True]]


def test_unknown_column_and_empty_file_are_clear(tmp_path: Path) -> None:
    path = _csv(tmp_path, "a,b\n1,2\n")
    with pytest.raises(DataError, match="no column 'c'; the header has: a, b"):
        read_column(path, "c")
    with pytest.raises(DataError, match="empty file"):
        read_column(_csv(tmp_path, ""), "a")


def test_numpy_arrays_lists_and_array_like_objects() -> None:
    class Series:  # what pandas and pyarrow offer, without either installed
        def __init__(self, values: list[object]) -> None:
            self._values = values

        def to_numpy(self) -> np.ndarray:
            return np.array(self._values, dtype=object)

    assert esa.as_column(Series([1, 2, 3])).dtype == np.int64
    assert prepare_values(np.array([2, 0, 2]), InputKind.CATEGORICAL).values.tolist() == [1, 0, 1]
    assert prepare_values(Series(["x", "y"]), InputKind.CATEGORICAL).categories == ("x", "y")
    with pytest.raises(DataError, match="one value per user"):
        prepare_values(np.zeros((2, 2)), InputKind.REAL01)


def test_a_real_columns_sum_is_stated_in_its_own_units() -> None:
    """The affine map back from the protocol's scale: the truth is the clipped column's sum,
    the std scales by (b − a)/(hi − lo); no reading for bins, or for a statistic that is not
    the sum of the mapped values."""
    data = prepare_values([0, 50, 100, 150, -10], InputKind.REAL01, value_range=(0, 100))
    units = data.sum_in_data_units([2.6], [2.5], [0.1])
    assert units is not None
    assert units["truth"] == pytest.approx([250.0])  # 0 + 50 + 100 + 100 + 0 after clipping
    assert units["estimate"] == pytest.approx([260.0])
    assert units["expected_std"] == pytest.approx([10.0])
    pm1 = prepare_values([20.0, 25.0, 30.0], InputKind.REAL_PM1, value_range=(20, 30))
    u = pm1.sum_in_data_units([0.5], [0.0], [0.2])
    assert u is not None
    assert u["truth"] == pytest.approx([75.0])
    assert u["estimate"] == pytest.approx([77.5])  # 0.5 on [−1, 1] is 2.5 in [20, 30] units
    assert u["expected_std"] == pytest.approx([1.0])
    assert data.sum_in_data_units([2.6], [2.4], [0.1]) is None  # not the mapped sum
    assert prepare_values([0.2, 0.4], InputKind.REAL01).sum_in_data_units([1], [0.6], [1]) is None
    bins = prepare_values(["a", "b"], InputKind.CATEGORICAL)
    assert bins.sum_in_data_units([1, 1], [1, 1], [1, 1]) is None
