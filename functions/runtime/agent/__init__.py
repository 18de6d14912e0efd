"""The member agent: what one cluster reports. It reads the member (pods, nodes, the
collector's vocabulary page), computes signals and the report, counts start failures,
keeps the inventory and costs, and — while its member holds the hub — runs the hub's
step. It may use `hub`, `shared` and `kube`; nothing imports the agent but `cli`.

`loop.py` composes one module per job and runs each on its cadence: `signal_sampling`,
`member_report` (over `collect`, `parse`, `signals`, `promql_scope`), `hub_step` (over
`fleet_reading` and `model_advice`), `health`, and `inventory_record` (over `inventory`,
`idle` and `cost`); `role` is how it asks the election whether it is the hub."""
