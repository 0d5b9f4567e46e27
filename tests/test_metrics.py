"""The Prometheus text hubd's /metrics renders: one label, several labels, escaping."""

from __future__ import annotations

import pytest

from hubd.metrics import Metrics


def test_a_counter_with_two_labels_renders_each_as_its_own_label() -> None:
    metrics = Metrics()
    commands = metrics.counter("hubd_driver_commands_total", "driver commands", ("command", "result"))
    commands.inc(label=("OAuth", "ok"))
    commands.inc(label=("OAuth", "ok"))
    commands.inc(label=("refresh", "error"))
    text = metrics.render()
    assert 'hubd_driver_commands_total{command="OAuth",result="ok"} 2' in text
    assert 'hubd_driver_commands_total{command="refresh",result="error"} 1' in text
    assert commands.get(("OAuth", "ok")) == 2


def test_a_counter_refuses_the_wrong_number_of_label_values() -> None:
    commands = Metrics().counter("c_total", "c", ("command", "result"))
    with pytest.raises(ValueError, match="takes 2 label values"):
        commands.inc(label="OAuth:ok")


def test_one_label_values_are_escaped_and_an_unlabelled_counter_shows_zero() -> None:
    metrics = Metrics()
    metrics.counter("plain_total", "plain")
    metrics.counter("counted_total", "counted").inc(2)
    metrics.counter("by_kind_total", "by kind", "kind").inc(label='a"b\\c\nd')
    text = metrics.render()
    assert "plain_total 0" in text and "counted_total 2" in text
    assert 'by_kind_total{kind="a\\"b\\\\c\\nd"} 1' in text
