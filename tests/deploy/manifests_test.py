#!/usr/bin/python3
"""Offline checks of the deployment files under deploy/ (make test-deploy).

Every agent-sandbox resource (group *.agents.x-k8s.io) is validated against the
openAPIV3Schema of its CRD and version, as published by agent-sandbox (read from
$SANDCELL_K8S_CRDS, default ../shared/k8s/agent-sandbox-crds from the project's
root). Fields a schema does not know are errors, as with kubectl's strict field
validation. A Deployment's pod spec is validated against the PodSpec schema
those CRDs embed. References between the resources must resolve, and yamllint
must pass on every YAML file. The PrometheusRule's groups must be those of the
plain rules file (deploy/monitoring/). Without the CRDs (a checkout with no ../shared
beside it) the schema checks are skipped, said so, and the rest still runs.
Prints one line per check, then "N passed, M failed, K skipped"; exits 1 if
anything failed.
"""
import copy
import glob
import json
import os
import subprocess
import sys

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CRDS = os.environ.get("SANDCELL_K8S_CRDS", os.path.normpath(
    os.path.join(ROOT, "..", "shared", "k8s", "agent-sandbox-crds")))
CRDS_SOURCE = "https://github.com/kubernetes-sigs/agent-sandbox (its CRD manifests)"
results = {"passed": 0, "failed": 0, "skipped": 0}


def check(name, ok, why=""):
    results["passed" if ok else "failed"] += 1
    print(f"ok - {name}" if ok else f"not ok - {name}: {why}")


def skip(name, why):
    results["skipped"] += 1
    print(f"skip - {name}: {why}")


def strict(schema):
    """The schema with additionalProperties: false wherever an object lists its
    properties and does not keep unknown fields (kubectl --validate=strict)."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [strict(v) for v in schema]
    return schema


def load_crds():
    """{(apiVersion, kind): strict schema} from every CRD file."""
    schemas = {}
    for path in sorted(glob.glob(os.path.join(CRDS, "*.yaml"))):
        with open(path) as f:
            for crd in yaml.safe_load_all(f):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
                for v in crd["spec"]["versions"]:
                    schemas[(f"{group}/{v['name']}", kind)] = \
                        strict(v["schema"]["openAPIV3Schema"])
    return schemas


def errors_of(schema, doc):
    v = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    return ["/".join(map(str, e.absolute_path)) + ": " + e.message
            for e in sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))]


def is_agent_sandbox(doc):
    return doc.get("apiVersion", "").split("/")[0].endswith("agents.x-k8s.io")


def validate(schemas, doc):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in schemas:
        return [f"no CRD defines {key[1]} in {key[0]}"]
    return errors_of(schemas[key], doc)


def main():
    schemas = pod_spec = None
    if os.path.isdir(CRDS):
        schemas = load_crds()
        check("CRD schemas load", len(schemas) >= 4, f"only {len(schemas)} in {CRDS}")
        pod_spec = schemas[("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate")][
            "properties"]["spec"]["properties"]["podTemplate"]["properties"]["spec"]
    else:
        skip("the manifests against agent-sandbox's CRD schemas",
             f"{CRDS} is missing; point SANDCELL_K8S_CRDS at a directory holding "
             f"agent-sandbox's CRD YAML files, from {CRDS_SOURCE}")

    files = sorted(glob.glob(os.path.join(ROOT, "deploy", "**", "*.y*ml"), recursive=True))
    docs = []
    for path in (f for f in files if f.startswith(os.path.join(ROOT, "deploy", "kubernetes", ""))):
        rel = os.path.relpath(path, ROOT)
        try:
            with open(path) as f:
                docs += [(rel, d) for d in yaml.safe_load_all(f) if d]
        except yaml.YAMLError as e:
            check(f"{rel} parses", False, str(e))

    names = {}
    for rel, doc in docs:
        what = f"{rel}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        names.setdefault(doc.get("kind"), set()).add(doc.get("metadata", {}).get("name"))
        ok = all(doc.get(k) for k in ("apiVersion", "kind")) and doc.get("metadata", {}).get("name")
        check(f"{what} has apiVersion, kind and a name", bool(ok))
        if is_agent_sandbox(doc):
            check(f"{what} uses v1beta1", doc.get("apiVersion", "").endswith("/v1beta1"),
                  doc.get("apiVersion"))
            if schemas:
                errs = validate(schemas, doc)
                check(f"{what} matches its CRD", not errs, "; ".join(errs[:5]))
        elif doc.get("kind") == "Deployment" and pod_spec:
            errs = errors_of(pod_spec, doc["spec"]["template"]["spec"])
            check(f"{what}: pod spec matches the PodSpec schema", not errs, "; ".join(errs[:5]))

    # pods: probes that mean something, a grace period that covers --grace
    for rel, doc in docs:
        spec = (doc.get("spec", {}).get("podTemplate") or doc.get("spec", {}).get("template") or {}).get("spec")
        if not spec:
            continue
        c = spec["containers"][0]
        args = c.get("args", [])
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        grace = int(args[args.index("--grace") + 1] if "--grace" in args
                    else env.get("SANDCELL_GRACE", 30))
        check(f"{rel}: readiness is /ready, liveness /health",
              c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/ready" and
              c.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/health")
        check(f"{rel}: clients may name the pod by its Service (--allowed-host)",
              "--allowed-host" in args or bool(env.get("SANDCELL_ALLOWED_HOST")))
        check(f"{rel}: terminationGracePeriodSeconds covers --grace {grace}",
              spec.get("terminationGracePeriodSeconds", 30) > grace,
              f"{spec.get('terminationGracePeriodSeconds', 30)} s")
        sc = spec.get("securityContext", {})
        check(f"{rel}: unprivileged on the node (non-root, or root of the pod's own user "
              "namespace) with a seccomp profile",
              (sc.get("runAsNonRoot") is True or spec.get("hostUsers") is False) and
              "seccompProfile" in sc)
        csc = c.get("securityContext", {})
        check(f"{rel}: no privilege escalation, read-only root, capabilities dropped",
              csc.get("allowPrivilegeEscalation") is False and
              csc.get("readOnlyRootFilesystem") is True and
              csc.get("capabilities", {}).get("drop") == ["ALL"])

    # boxed by default: nothing unboxes the kernels; a Localhost profile is
    # sandcell's, whose additions to Docker's default are the namespace box's
    for rel, doc in docs:
        spec = (doc.get("spec", {}).get("podTemplate") or doc.get("spec", {}).get("template") or {}).get("spec")
        if spec:
            c = json.dumps(spec["containers"])
            check(f"{rel}: {doc.get('kind')} {doc.get('metadata', {}).get('name')} sets no "
                  "SANDCELL_NO_SANDBOX and no --no-sandbox",
                  "SANDCELL_NO_SANDBOX" not in c and "--no-sandbox" not in c)
        prof = ((spec or {}).get("securityContext") or {}).get("seccompProfile") or {}
        if prof.get("type") == "Localhost":
            check(f"{rel}: the Localhost profile is sandcell's (sandcell/seccomp.json)",
                  prof.get("localhostProfile") == "sandcell/seccomp.json", str(prof))
    with open(os.path.join(ROOT, "deploy", "docker", "seccomp.json")) as f:
        profile = json.load(f)
    box = ["clone", "mount", "pivot_root", "setns", "sethostname", "umount2", "unshare"]
    last = profile["syscalls"][-1]
    check("deploy/docker/seccomp.json: Docker's default action, and its last entry allows "
          "the namespace box's calls without a capability",
          profile["defaultAction"] == "SCMP_ACT_ERRNO" and sorted(last["names"]) == sorted(box) and
          last["action"] == "SCMP_ACT_ALLOW" and not last.get("args") and
          not last.get("includes") and not last.get("excludes"))
    allowed = {n for e in profile["syscalls"] if e["action"] == "SCMP_ACT_ALLOW" and
               not (e.get("includes") or {}).get("caps") for n in e["names"]}
    check("deploy/docker/seccomp.json: keyrings, bpf, ptrace without CAP_SYS_PTRACE and the "
          "new mount API stay refused",
          not allowed & {"keyctl", "add_key", "request_key", "bpf", "fsopen", "open_tree",
                         "move_mount", "kcmp", "pidfd_getfd"})
    check("deploy/docker/seccomp.json names where it comes from and its licence",
          "Apache License 2.0" in " ".join(profile.get("comment", [])))

    for rel, doc in docs:
        ref = (doc.get("spec", {}).get("sandboxTemplateRef") or {}).get("name")
        if ref:
            check(f"{rel}: template {ref} exists", ref in names.get("SandboxTemplate", ()))
        ref = (doc.get("spec", {}).get("warmPoolRef") or {}).get("name")
        if ref:
            check(f"{rel}: warm pool {ref} exists", ref in names.get("SandboxWarmPool", ()))
    rules_file = os.path.join(ROOT, "deploy", "monitoring", "sandcell-rules.yml")
    with open(rules_file) as f:
        rules = yaml.safe_load(f)
    for rel, doc in docs:
        if doc.get("kind") == "PrometheusRule":
            # no CRD of the Prometheus Operator here: its content is the plain
            # rules file's, which promtool checks (tests/deploy/monitoring_test.py)
            check(f"{rel}: monitoring.coreos.com/v1",
                  doc.get("apiVersion") == "monitoring.coreos.com/v1", doc.get("apiVersion"))
            check(f"{rel}: spec.groups are deploy/monitoring/sandcell-rules.yml's groups",
                  doc.get("spec") == {"groups": rules["groups"]},
                  "edit both, or copy the file's groups under spec")
    kinds = {d.get("kind") for _, d in docs}
    for k in ("SandboxTemplate", "SandboxWarmPool", "SandboxClaim", "Deployment", "Service",
              "PrometheusRule"):
        check(f"deploy/ has a {k}", k in kinds)

    if schemas:
        rejects_what_it_should(schemas, docs)
    lint = subprocess.run(["yamllint", "--strict", "-c", os.path.join(ROOT, "deploy", ".yamllint")]
                          + files, capture_output=True, text=True)
    check(f"yamllint on {len(files)} files", lint.returncode == 0, lint.stdout + lint.stderr)


def rejects_what_it_should(schemas, docs):
    """The validation itself rejects what it should (else the checks above prove nothing)."""
    tmpl = next(d for _, d in docs if d.get("kind") == "SandboxTemplate")
    bad = copy.deepcopy(tmpl)
    bad["spec"]["podTemplate"]["spec"]["containers"][0]["readinesProbe"] = {}
    check("an unknown container field is rejected", validate(schemas, bad) != [])
    bad = copy.deepcopy(tmpl)
    bad["spec"]["networkPolicyManagement"] = "Sometimes"
    check("a value outside an enum is rejected", validate(schemas, bad) != [])
    bad = copy.deepcopy(tmpl)
    del bad["spec"]["podTemplate"]
    check("a missing required field is rejected", validate(schemas, bad) != [])
    bad = dict(copy.deepcopy(tmpl), apiVersion="extensions.agents.x-k8s.io/v9")
    check("an unknown API version is rejected", validate(schemas, bad) != [])


if __name__ == "__main__":
    main()
    print(f"{results['passed']} passed, {results['failed']} failed, {results['skipped']} skipped")
    sys.exit(1 if results["failed"] else 0)
