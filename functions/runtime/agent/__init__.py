"""The member agent: what one cluster reports. It reads the member (pods, nodes, the
collector's vocabulary page), computes signals and the report, counts start failures,
keeps the inventory and costs, and — while its member holds the hub — runs the hub's
step. It may use `hub`, `shared` and `kube`; nothing imports the agent but `cli`."""
