"""The evaluation harness: task suites, the four variants, metrics and reports.

The experiment of seed 004: on the same tasks, model and tools, does an agent
driven by explicit state and verified skills beat one driven by its transcript,
in success and in cost, and does it recover from interruptions?
"""
