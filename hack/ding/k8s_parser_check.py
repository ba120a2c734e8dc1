#!/usr/bin/env python3
"""Check that DI-engine's own K8SParser accepts the env our orchestrator gives task-job pods.

Run with the venv python printed by hack/ding/setup.sh:

    py=$(hack/ding/setup.sh | tail -1)
    "$py" hack/ding/k8s_parser_check.py < pods.json

stdin:  {"pods": [{"name": "<pod name>", "env": {"DI_RANK": "0", "DI_NODES": "...", ...}}, ...]}
stdout: one JSON line per pod with what the parser returned for each topology.
exit:   0 all good; 1 the parser raised or returned something inconsistent
        (each failure names the pod and topology on stderr); 2 bad input/setup.

The parser module is loaded by file path, never via `import ding`: the ding
package's __init__ chain pulls in torch and much more.
"""

import argparse
import importlib.util
import json
import os
import re
import site
import sys
import traceback

PARSER_REL = os.path.join("ding", "entry", "cli_parsers", "k8s_parser.py")
TOPOLOGIES = ("mesh", "star", "alone")
DEFAULT_PORT = 50515  # ditask's (and K8SParser's) default base port

# Parameters of ding.entry.cli_ditask._cli_ditask (DI-engine 0.5.3) other than
# platform/platform_spec. `ditask --platform k8s` calls
# k8s_parser(platform_spec, **these) and then _cli_ditask(**result), so every
# key the parser returns must be one of them.
DITASK_PARAMS = (
    "package", "main", "parallel_workers", "protocol", "ports", "attach_to", "address",
    "labels", "node_ids", "topology", "mq_type", "redis_host", "redis_port",
    "startup_interval", "local_rank",
)

TASK_NODES_RE = re.compile(r"^DI_[A-Z0-9_]+_NODES$")


class InputError(Exception):
    pass


def find_parser(explicit):
    if explicit:
        if not os.path.isfile(explicit):
            raise InputError("parser file not found: %s" % explicit)
        return explicit
    dirs = list(site.getsitepackages())
    for d in dirs:
        cand = os.path.join(d, PARSER_REL)
        if os.path.isfile(cand):
            return cand
    raise InputError(
        "%s not found in %s; run this script with the python printed by hack/ding/setup.sh"
        % (PARSER_REL, dirs))


def ding_version():
    try:
        from importlib.metadata import version
        return version("DI-engine")
    except Exception:
        return "unknown"


def load_parser_module(path, tag):
    spec = importlib.util.spec_from_file_location("_di_k8s_parser_%s" % tag, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ditask_kwargs(topology, parallel_workers, ports):
    """The kwargs `ditask --platform k8s --topology T` hands to k8s_parser when no
    other option is given (click defaults; --ports is a str option)."""
    return {
        "package": None,
        "main": None,
        "parallel_workers": parallel_workers,
        "protocol": "tcp",
        "ports": ports,
        "attach_to": None,
        "address": None,
        "labels": None,
        "node_ids": None,
        "topology": topology,
        "mq_type": "nng",
        "redis_host": None,
        "redis_port": None,
        "startup_interval": 1,
        "local_rank": 0,
    }


def read_pods(stream):
    try:
        doc = json.load(stream)
    except ValueError as e:
        raise InputError("stdin is not valid JSON: %s" % e)
    pods = doc.get("pods") if isinstance(doc, dict) else None
    if not isinstance(pods, list) or not pods:
        raise InputError('expected {"pods": [...]} with at least one pod')
    for i, pod in enumerate(pods):
        if not isinstance(pod, dict) or not isinstance(pod.get("name"), str) \
                or not isinstance(pod.get("env"), dict):
            raise InputError('pods[%d] must be {"name": str, "env": {str: str}}' % i)
        for k, v in pod["env"].items():
            if not isinstance(v, str):
                raise InputError("pod %s: env %s must be a string (got %r)" % (pod["name"], k, v))
    return pods


def job_level_checks(pods, allow_partial):
    """Contract checks across pods (things no single parser run can see)."""
    errors = []
    nodes_values = {p["env"].get("DI_NODES") for p in pods}
    if len(nodes_values) > 1:
        errors.append("pods disagree on DI_NODES: %s" % sorted(map(str, nodes_values)))
    ranks = [p["env"].get("DI_RANK") for p in pods]
    dupes = sorted({r for r in ranks if r is not None and ranks.count(r) > 1})
    if dupes:
        errors.append("duplicate DI_RANK values: %s" % dupes)
    if not allow_partial and len(nodes_values) == 1:
        nodes = next(iter(nodes_values))
        if nodes is not None and len(nodes.split(",")) != len(pods):
            errors.append("DI_NODES lists %d nodes but %d pods were given (use --allow-partial "
                          "to check a subset)" % (len(nodes.split(",")), len(pods)))
    job_ids = {p["env"].get("DI_JOB_ID") for p in pods}
    if len(job_ids) > 1:
        errors.append("pods disagree on DI_JOB_ID: %s" % sorted(map(str, job_ids)))
    for job_id in job_ids - {None}:
        if not re.match(r"^[^/]+/[^/]+$", job_id):
            errors.append("DI_JOB_ID=%r is not <namespace>/<name>" % job_id)
    return errors


def pod_contract_errors(pod):
    """Checks of one pod's env against our contract, independent of the parser."""
    env, errors = pod["env"], []
    missing = [k for k in ("DI_RANK", "DI_NODES") if k not in env]
    if missing:
        return ["%s not set" % ", ".join(missing)], None, []
    nodes = env["DI_NODES"].split(",")
    try:
        rank = int(env.get("DI_RANK", ""))
    except ValueError:
        return ["DI_RANK=%r is not an integer" % env.get("DI_RANK")], None, nodes
    if not 0 <= rank < len(nodes):
        # The parser rejects rank >= n, but a negative rank would silently index from the end.
        return ["DI_RANK=%d out of range 0..%d" % (rank, len(nodes) - 1)], None, nodes
    for n in nodes:
        if not n or ":" in n or "/" in n:
            errors.append("DI_NODES entry %r is not a bare host name" % n)
    if nodes[rank].split(".")[0] != pod["name"]:
        errors.append("DI_NODES[%d]=%r is not pod %r's FQDN" % (rank, nodes[rank], pod["name"]))
    for key in sorted(env):
        if TASK_NODES_RE.match(key) and key != "DI_NODES":
            stray = [n for n in env[key].split(",") if n and n not in nodes]
            if stray:
                errors.append("%s has nodes not in DI_NODES: %s" % (key, stray))
    return errors, rank, nodes


def expected_attach_to(topology, rank, nodes, parallel_workers, base_port):
    if rank == 0 or topology == "alone":
        peers = []
    elif topology == "mesh":
        peers = nodes[:rank]
    else:  # star
        peers = nodes[:1]
    return ",".join("tcp://%s:%d" % (n, base_port + w) for n in peers for w in range(parallel_workers))


def result_errors(result, topology, rank, nodes, parallel_workers, ports_arg):
    errors = []
    base_port = int(ports_arg) if ports_arg else DEFAULT_PORT
    want = {
        "address": nodes[rank],
        "node_ids": rank * parallel_workers,
        "topology": topology,
        "parallel_workers": parallel_workers,
        "attach_to": expected_attach_to(topology, rank, nodes, parallel_workers, base_port),
    }
    for key, value in want.items():
        if result.get(key) != value:
            errors.append("%s=%r, expected %r" % (key, result.get(key), value))
    if str(result.get("ports")) != str(ports_arg or DEFAULT_PORT):
        errors.append("ports=%r, expected %r" % (result.get("ports"), ports_arg or DEFAULT_PORT))
    extra = sorted(set(result) - set(DITASK_PARAMS))
    if extra:
        errors.append("keys ditask's _cli_ditask would reject: %s" % extra)
    return errors


def jsonable(result):
    return {k: (v if isinstance(v, (str, int, float, bool, type(None), list)) else str(v))
            for k, v in result.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parser", help="path to k8s_parser.py (default: found in site-packages)")
    ap.add_argument("--parallel-workers", type=int, default=1,
                    help="as ditask --parallel-workers (default 1)")
    ap.add_argument("--ports", type=int, default=None, help="as ditask --ports, a single base "
                    "port (default: unset, i.e. %d)" % DEFAULT_PORT)
    ap.add_argument("--allow-partial", action="store_true",
                    help="accept fewer pods on stdin than DI_NODES lists")
    args = ap.parse_args()
    if args.ports is not None:
        args.ports = str(args.ports)  # click hands --ports to the parser as a str

    try:
        parser_path = find_parser(args.parser)
        pods = read_pods(sys.stdin)
    except InputError as e:
        print("k8s_parser_check: error: %s" % e, file=sys.stderr)
        return 2

    failures = ["job: %s" % e for e in job_level_checks(pods, args.allow_partial)]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("DI_")}

    for idx, pod in enumerate(pods):
        name = pod["name"]
        contract_errors, rank, nodes = pod_contract_errors(pod)
        line = {"pod": name, "rank": pod["env"].get("DI_RANK"), "results": {}}
        for topology in TOPOLOGIES:
            where = "pod %s topology %s" % (name, topology)
            os.environ.clear()
            os.environ.update(base_env)
            os.environ.update(pod["env"])
            try:
                mod = load_parser_module(parser_path, "%d_%s" % (idx, topology))
                result = mod.k8s_parser(None, **ditask_kwargs(topology, args.parallel_workers,
                                                              args.ports))
            except Exception as e:
                frame = traceback.extract_tb(e.__traceback__)[-1]
                failures.append("%s: K8SParser raised %s: %s (at %s:%s)" % (
                    where, type(e).__name__, e, os.path.basename(frame.filename), frame.lineno))
                continue
            line["results"][topology] = jsonable(result)
            if rank is not None:
                for err in result_errors(result, topology, rank, nodes,
                                         args.parallel_workers, args.ports):
                    failures.append("%s: %s" % (where, err))
        for err in contract_errors:
            failures.append("pod %s: %s" % (name, err))
        print(json.dumps(line, sort_keys=True))

    os.environ.clear()
    os.environ.update(base_env)
    summary = "DI-engine %s, %s" % (ding_version(), parser_path)
    if failures:
        for f in failures:
            print("k8s_parser_check: FAIL %s" % f, file=sys.stderr)
        print("k8s_parser_check: %d failure(s) (%s)" % (len(failures), summary), file=sys.stderr)
        return 1
    print("k8s_parser_check: OK: %d pod(s) x %s (%s)" % (len(pods), "/".join(TOPOLOGIES), summary),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
