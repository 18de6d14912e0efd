"""The fleet box: a whole modelplane fleet on one machine, as local processes on loopback.

A real Crossplane control plane (its own kube-apiserver, Crossplane core,
provider-kubernetes and our four functions over mTLS) and member kube-apiservers, each
with its own etcd and kube-controller-manager. Members named as GPU members get a real
kube-scheduler, KWOK nodes made from the example node pools with DRA ResourceSlices,
and KWOK as their kubelet; the runtime (our agent and scaler, KEDA's operator and
metrics adapter) runs on the members that ask for it. No Docker, no kubelet, no
registry. The e2e tier (tests/e2e), the benches that need a fleet, and `make fleet`
(which keeps one running until `make fleet-down`) all start it the same way.

One module per thing the box runs, imported one way only (tests/unit/
test_fleetbox_imports.py fails on a circle); each module imports only the ones above it:

    process        Process: the one helper that starts, stops and restarts a process
                   (the box's and the tests' own), in its own group, dying with its parent
    wait           FleetBoxError, wait_for, and reading a resource's conditions
    certificates   a CA and the pairs it signs (openssl)
    clusters       Clusters: the box's API servers as a caller talks to them (kubectl,
                   clients, apply, get) and the processes running against them
    gpu            GPU members: KWOK nodes from node pools, DRA ResourceSlices and
                   DeviceClasses, KWOK's pod stages, kube-scheduler
    members        every cluster's etcd, kube-apiserver and kube-controller-manager,
                   and what a member's substrate installs
    control_plane  Crossplane core, provider-kubernetes, our functions, the XRDs, and
                   the Secrets and provider configs that connect the members
    box            FleetBox: starts the parts above in order, stops them, saves its
                   state, and attaches to a box another process runs
    service_proxy  in-cluster Service names mapped to local addresses (for KEDA and
                   our agent, host processes that do not use the members' cluster DNS)
    dns            a member's cluster DNS: CoreDNS with its kubernetes plugin, which the
                   real pods of a member that serves for real resolve through
    runtime        Runtime: our agent and scaler, KEDA and the HPA controller per member
    cli            `make fleet` / `make fleet-down` (`python hack/fleetbox up|down|status`)

`hack/` is on sys.path wherever the box is imported (tests/conftest.py puts it there for
the tests, each bench puts it there itself, `python hack/fleetbox` through __main__.py).
The box also reads the checkout it lives in (examples/, apis/, package/) and borrows
the runtime tier's API-server members (tests/runtime/cluster.py), so the checkout's
root goes on sys.path too.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
