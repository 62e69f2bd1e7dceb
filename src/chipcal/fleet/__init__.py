"""A fleet calibrated through its scheduler (docs/fleet.md): `chipcal calibrate` once per node into
a shared store, the tasks' state, and the report that compares the nodes of one machine class.

Modules: store (the store's layout and the tasks' state), task (what one task runs on its
node), slurm and local (how the tasks are started), k8s (the Indexed Job manifest), status (which
tasks ran, failed or wait), outliers (nodes off their peers, and drift since a node's last run),
report (the fleet report: terminal, JSON, CSV, HTML with plots).
"""
