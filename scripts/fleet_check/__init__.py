"""``scripts/fleet-check``: a fleet of hosts under network faults (issue 36).

Modules: :mod:`.netns` (namespaces, entering one), :mod:`.switch` (the user-space Ethernet
switch joining the hosts, with partitions and netem-style impairments), :mod:`.topology` (the
hosts, building and tearing down a fleet, cleaning up after an interrupted one),
:mod:`.services` (PostgreSQL, Redis, API and worker processes in their hosts), :mod:`.bringup`,
:mod:`.client` (the REST client host and its recorded history), :mod:`.observe` (the database's
facts), :mod:`.faults` (the fault phases), :mod:`.reproduce` (undisturbed runs computed here),
:mod:`.checker` (invariants and each fault's cost), :mod:`.report`, :mod:`.run` and :mod:`.main`.
"""
