"""A step's typed facts as the runner makes them: its `observe` of its probes' values. Each
probe answers as a command that failed and printed nothing (its parser's "nothing found"),
but for the values a test gives by probe name; a wait's look adds the step's wait probes."""

from __future__ import annotations


def looked(step, ctx, waiting: bool = False, **values):
    asked = [*step.probes(ctx), *(step.wait_probes(ctx) if waiting else [])]
    return step.observe({**{f.name: f.parse("", 1) for f in asked}, **values}, ctx)
