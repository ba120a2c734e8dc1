#!/usr/bin/env python3
"""Ask a replica endpoint what DI-engine's coordinator asks it, through DI-engine's own client.

Run with the venv python printed by hack/ding/setup.sh:

    py=$(hack/ding/setup.sh | tail -1)
    "$py" hack/ding/operator_client.py http://127.0.0.1:22281 <namespace> <job>-coordinator post 2
    "$py" hack/ding/operator_client.py http://127.0.0.1:22281 <namespace> <job>-coordinator get
    "$py" hack/ding/operator_client.py http://127.0.0.1:22281 <namespace> <job>-coordinator delete 1

`post N` is the coordinator's init request (N more collectors), `get` its sync of the replica
list each second, `delete N` its request for N fewer collectors: OperatorServer.post_replicas,
get_replicas and delete_replicas of DI-engine's comm_coordinator.

stdout: one JSON line, {"success", "code", "message", "data"}, as the client returns them.
exit:   0 the client got an answer (whatever it says); 2 bad usage or setup.

DI-engine's OperatorServer module is loaded from its package without running the package's
__init__ chain (which pulls in torch): its parent packages are made empty ones pointing at their
directories, so only the client and what it imports (ding.interaction.base) run.
"""

import importlib
import json
import os
import site
import sys
import types
from urllib.parse import urlsplit


def operator_server_class():
    roots = [os.path.join(d, "ding") for d in site.getsitepackages()]
    root = next((r for r in roots if os.path.isdir(r)), None)
    if root is None:
        sys.exit("DI-engine is not installed in this interpreter (run hack/ding/setup.sh)")
    for name in ("ding", "ding.interaction", "ding.worker", "ding.worker.coordinator"):
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, *name.split(".")[1:])]
        sys.modules[name] = package
    return importlib.import_module("ding.worker.coordinator.operator_server").OperatorServer


def main(argv):
    if len(argv) < 5 or argv[4] not in ("post", "get", "delete"):
        print(__doc__, file=sys.stderr)
        return 2
    url, namespace, coordinator, op = argv[1:5]
    count = int(argv[5]) if len(argv) > 5 else 0
    address = urlsplit(url)
    server = operator_server_class()(
        host=address.hostname, port=address.port, namespace=namespace, name=coordinator
    )
    server.set_worker_type("coordinator")
    if op == "post":
        answer = server.post_replicas({"collectors": {"replicas": count}, "learners": {"replicas": 0}})
    elif op == "get":
        answer = server.get_replicas()
    else:
        answer = server.delete_replicas(n_collectors=count)
    success, code, message, data = answer
    print(json.dumps({"success": success, "code": code, "message": message, "data": data}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
