"""The Prometheus text hubd's /metrics renders: one label, several labels, escaping, histograms."""

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


def test_a_histogram_renders_cumulative_buckets_with_sum_and_count_per_label() -> None:
    metrics = Metrics()
    stages = metrics.histogram("stage_seconds", "stages", "stage", (0.001, 0.01))
    for value in (0.0005, 0.001, 0.002, 0.5):  # a value on a bound counts in that bucket (le: less or equal)
        stages.observe(value, "post")
    stages.observe(0.02, "commit")
    assert metrics.histogram("stage_seconds", "other help", "stage", (1.0,)) is stages  # one per name
    lines = metrics.render().splitlines()
    assert lines[:2] == ["# HELP stage_seconds stages", "# TYPE stage_seconds histogram"]
    assert 'stage_seconds_bucket{stage="post",le="0.001"} 2' in lines
    assert 'stage_seconds_bucket{stage="post",le="0.01"} 3' in lines
    assert 'stage_seconds_bucket{stage="post",le="+Inf"} 4' in lines
    assert 'stage_seconds_count{stage="post"} 4' in lines
    assert 'stage_seconds_sum{stage="post"} 0.5035' in lines
    assert 'stage_seconds_bucket{stage="commit",le="0.01"} 0' in lines and stages.count("commit") == 1


def test_a_histogram_refuses_bounds_out_of_order() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Metrics().histogram("h", "h", "stage", (0.1, 0.01))
