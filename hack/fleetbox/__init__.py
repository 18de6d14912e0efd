"""The fleet box: a real Crossplane control plane and member API servers on loopback,
run as local processes (see box.py); `make fleet` runs cli.py."""
