"""Layer 4: a test's Laya route below the plugin, pytest-free.

`modes` (`Mode`, `RecordMode`: what the run does with a test's traffic), `spec_check` (each
exchange held to the spec its server claims, counted in the run's tally), `provenance` (where a
recording came from), `changes` (what re-recording changed). The plugin's `TestRoute`
(`pytest_laya.plugin.routes`) opens, switches and closes a route with them.
"""
