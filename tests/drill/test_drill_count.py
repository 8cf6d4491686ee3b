"""The drill's counting rules (replay.drill.count), on hand-written books."""

from __future__ import annotations

from replay.drill.books import Op
from replay.drill.count import duplicated, missing, percentile, sent


def _send(key: str = "k") -> Op:
    return Op("send", "pay", key, False)


def _verify(found: bool, key: str = "k") -> Op:
    return Op("verify", "pay", key, found)


def test_a_second_send_of_one_call_is_a_duplicate() -> None:
    assert duplicated([_send(), _send()]) == 1
    assert duplicated([_send(), _send(), _send()]) == 2


def test_a_resend_after_the_verifier_found_nothing_is_not() -> None:
    """The verifier showed the first send did not happen: the second is the only one."""
    assert duplicated([_send(), _verify(False), _send()]) == 0
    assert duplicated([_send(), _verify(True), _send()]) == 1


def test_sends_of_different_calls_are_not_duplicates() -> None:
    assert duplicated([_send("a"), _send("b"), Op("send", "mail", "a", False)]) == 0


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 0.95) is None
    assert percentile([3.0, 1.0, 2.0], 0.95) == 3.0
    assert percentile([float(n) for n in range(1, 101)], 0.95) == 95.0


def test_fewer_calls_sent_than_the_reference_are_lost() -> None:
    reference = sent([_send("a"), _send("b"), _send("b")])
    assert missing([_send("a")], reference) == 1
    assert missing([_send("x"), _send("y")], reference) == 0
