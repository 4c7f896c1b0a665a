#!/usr/bin/env python3
"""The Kubernetes manifests (k8s/) and the Dockerfile, checked against the built binary.

Renders every kustomization under k8s/ with `kubectl kustomize` (each kubectl named by
KUBECTLS, colon-separated, else KUBECTL, else `kubectl` on PATH; all must render the same
objects) and checks the objects:

  - every `--flag` a calleval container passes exists in `calleval serve --help`, `--roles`
    names known roles;
  - every environment variable of a calleval container (env, and every key of the ConfigMaps
    and Secrets it reads with envFrom that are part of the render) is the CALLEVAL_<FLAG> of an
    existing flag, as the help prints it (or one of libpq's PG* variables, or the blob store's
    AWS_* keys);
  - ConfigMaps, Secrets and keys referenced exist in the render, unless optional or one of the
    Secrets the operator creates for the production layout (EXTERNAL_SECRETS, not in try-it or
    all-in-one, which must be self-contained); *_FILE flags name a file a mounted Secret holds;
  - the container ports match the addresses the process listens on (--grpc-addr, --http-addr,
    --media-addr, on all interfaces), for the roles it runs (gRPC when any role besides the
    edge, HTTP with the edge, media with runs and no edge, advertised at the pod's IP from the
    downward API);
  - probes: gRPC probes on the container's gRPC port with a `service` the real binary,
    started with the same roles, answers SERVING to (and the role's own service where it
    registers one); HTTP probes on the HTTP port with paths the real edge answers 200 to;
  - Services select pods that have their target ports; CALLEVAL_<ROLE>_ADDR points at a Service
    port whose pods run that role; the database URL of a render that brings PostgreSQL points at
    its Service, user, database and password;
  - HorizontalPodAutoscalers and PodDisruptionBudgets target existing workloads (HPAs: no fixed
    replicas, CPU requests set; PDBs: multi-replica workloads);
  - the NetworkPolicy selects every pod with a gRPC port, opens gRPC to pods of the namespace
    only, the metrics port to those and one named (scraper's) namespace, the runs pods' media
    port to the edge pods only, and the edge's HTTP port to anyone; every pod is annotated for scraping on its metrics port;
  - what must be shared is: a pod whose /data is its own (an emptyDir) keeps nothing there that
    another pod needs (recordings in an s3:// store with its keys where the role touches them,
    the credentials, signing and internal keys from Secrets), and the pods of a render agree on
    the recordings store and on each key; production mounts no PersistentVolumeClaim and has no
    pod affinity, so its pods spread over nodes;
  - every calleval container runs the image `calleval` as UID 10001, non-root, read-only root,
    no capabilities; seccomp Unconfined only where the code sandbox runs (scoring, metrics), and
    then the namespace does not enforce a Pod Security level that refuses it;
  - every object of every render, type-checked by the TypeScript compiler against the
    Kubernetes 1.30 API types (tools/k8s: kubernetes-types, pinned with the compiler): a field
    the API does not have (a typo, a field of a later version), a value of the wrong type or a
    required field missing fails, as the API server would refuse the object;
  - the Dockerfile's runtime stage is debian:12-slim, runs as 10001 and copies both binaries;
  - try-it's per-role Deployments, run as processes on loopback with their rendered arguments
    and environment (Services as ports, PostgreSQL as a shared SQLite file), score a text call
    ingested at the edge.

Offline: needs kubectl (Debian's kubernetes-client), python3-yaml, python3-grpcio, and tools/k8s's
node_modules (scripts/setup runs npm ci there).
`ctest -V -R k8s_render` prints what it checked.
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

import grpc
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "k8s")
CALLEVAL = os.environ.get("CALLEVAL_BIN")

# Secrets the production layout expects to exist (k8s/README.md); a render that is meant to be
# applied on its own (SELF_CONTAINED) must bring every Secret it uses.
EXTERNAL_SECRETS = {"calleval-database", "calleval-internal", "calleval-recordings",
                    "calleval-tls"}
SELF_CONTAINED = {"all-in-one", "overlays/try-it"}
# Kustomizations that are pieces of the others, never applied alone: rendered (they must build)
# but not checked as an installation. The base leaves where recordings live to its overlays.
PARTS = {"common", "base"}
# Variables a calleval container may set besides CALLEVAL_*: libpq's (docs/operations.md), and
# the S3 keys the blob store reads from the environment, not from flags (docs/blob-store.md,
# "Credentials").
OTHER_ENV = {"PGPASSWORD", "PGPASSFILE", "PGSSLMODE", "PGSSLROOTCERT", "PGCONNECT_TIMEOUT",
             "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} | {"POD_IP"}
# The pod's IP from the downward API (status.podIP), which CALLEVAL_MEDIA_ADVERTISE_ADDR
# references as $(POD_IP); an address of the pod network stands in for it here.
POD_IP = "10.244.0.7"
# Roles that read or write recordings (docs/blob-store.md, "How the service uses it"), and those
# that seal or unseal agents' web channel credentials (--credentials-key-file).
RECORDING_ROLES = {"calls", "runs", "scoring", "edge"}
CREDENTIALS_KEY_ROLES = {"agents"}
# Key files every pod that reads them must share, and the roles that read them.
SHARED_FILES = {"internal-credential-file": None, "signing-key-file": {"calls", "edge"},
                "credentials-key-file": CREDENTIALS_KEY_ROLES}
# Images besides calleval's, and the renders they may appear in.
OTHER_IMAGES = {"postgres:15-bookworm"}
NAMESPACE = "calleval"
SANDBOX_ROLES = {"scoring", "metrics"}
HEALTH_PATHS = ["/healthz", "/readyz"]
# The type-check: tools/k8s (kubernetes-types and the TypeScript compiler, npm ci by
# scripts/setup), and the module of kubernetes-types that declares each apiVersion's kinds.
K8S_TOOLS = os.path.join(ROOT, "tools", "k8s")
API_TYPES = {"v1": "core/v1", "apps/v1": "apps/v1", "autoscaling/v2": "autoscaling/v2",
             "policy/v1": "policy/v1", "networking.k8s.io/v1": "networking/v1"}


def typescript_of(renders):
    """A TypeScript module declaring every object of `renders` as its Kubernetes type.

    Object literals assigned to a declared type get TypeScript's excess property check at every
    depth, so an unknown field is an error, not only a wrong type or a missing required one.
    Returns the source and the objects as (first line, "k8s/<render>: <kind> <name>")."""
    imports, declarations = {}, []
    for render in renders:
        for o in render.objects:
            module = API_TYPES.get(o.get("apiVersion"))
            if module is None:
                raise AssertionError("k8s/%s: no API types for %s %s" %
                                     (render.rel, o.get("apiVersion"), o.get("kind")))
            alias = "%s_%s" % (re.sub(r"\W", "_", module), o["kind"])
            imports.setdefault(module, set()).add((o["kind"], alias))
            declarations.append(("k8s/%s: %s %s" % (render.rel, o["kind"], o["metadata"]["name"]),
                                 "export const o%d: %s = %s;" %
                                 (len(declarations), alias, json.dumps(o, indent=1))))
    lines = ["import type { %s } from \"kubernetes-types/%s\";" %
             (", ".join("%s as %s" % ka for ka in sorted(kinds)), module)
             for module, kinds in sorted(imports.items())]
    objects = []
    for name, text in declarations:
        objects.append((len(lines) + 1, name))
        lines.extend(text.split("\n"))
    return "\n".join(lines) + "\n", objects


def kubectls():
    names = os.environ.get("KUBECTLS") or os.environ.get("KUBECTL") or "kubectl"
    return [n for n in names.split(":") if n]


def render_dirs():
    dirs = []
    for path in sorted(glob.glob(os.path.join(K8S, "**", "kustomization.yaml"), recursive=True)):
        dirs.append(os.path.relpath(os.path.dirname(path), K8S))
    return dirs


def render(kubectl, rel):
    out = subprocess.run([kubectl, "kustomize", os.path.join(K8S, rel)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise AssertionError("%s kustomize %s failed: %s" % (kubectl, rel, out.stderr))
    return [o for o in yaml.safe_load_all(out.stdout) if o]


def serve_help():
    out = subprocess.run([CALLEVAL, "serve", "--help"], capture_output=True, text=True,
                         check=True).stdout
    flags = {}
    for m in re.finditer(r"^  --([a-z0-9-]+) .*\benv (CALLEVAL_[A-Z0-9_]+)\)", out, re.M):
        flags[m.group(1)] = m.group(2)
    defaults = dict(re.findall(r"^  --([a-z0-9-]+) \S+  \(default (\S+),", out, re.M))
    roles = re.search(r"roles this process runs: (.*)$", out, re.M).group(1)
    return flags, defaults, {r.strip() for r in roles.split(",")} - {"all"}


def proto_services():
    names = []
    for path in glob.glob(os.path.join(ROOT, "proto", "calleval", "v1", "*.proto")):
        with open(path) as f:
            text = f.read()
        package = re.search(r"^package ([\w.]+);", text, re.M).group(1)
        names += ["%s.%s" % (package, s) for s in re.findall(r"^service (\w+)", text, re.M)]
    return sorted(names)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def host_port(addr):
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class Running:
    """`calleval serve` with some roles on loopback ports and a throwaway data dir."""

    def __init__(self, roles, data_dir, args=None, env=None):
        """With `args` and `env`: `calleval ARGS` in that environment (over ours without its
        CALLEVAL_ variables), which must run `roles`."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("CALLEVAL_")}
        if args is None:
            args = ["serve", "--roles", ",".join(sorted(roles)), "--data-dir", data_dir,
                    "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
                    "--admin-addr", "127.0.0.1:0", "--access-log",
                    "false"]
        self.proc = subprocess.Popen([CALLEVAL] + list(args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=dict(clean, **(env or {})))
        self.http = self.grpc_port = None
        want_http, want_grpc = "edge" in roles, bool(set(roles) - {"edge"})
        seen = []
        while (want_http and not self.http) or (want_grpc and not self.grpc_port):
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("calleval serve --roles=%s did not start: %s%s" %
                                   (",".join(roles), "".join(seen), self.proc.stderr.read()))
            seen.append(line)
            m = re.search(r"HTTP on (http://\S+)", line)
            if m:
                self.http = m.group(1)
            m = re.search(r"gRPC on port (\d+)", line)
            if m:
                self.grpc_port = int(m.group(1))

    def health(self, service):
        """grpc.health.v1.Health/Check, the messages written by hand (one string field in, one
        enum field out)."""
        name = service.encode()
        request = b"\x0a" + bytes([len(name)]) + name if name else b""
        with grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port) as channel:
            try:
                reply = channel.unary_unary("/grpc.health.v1.Health/Check")(request, timeout=5)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return "NOT_FOUND"
                raise
        return {b"": "UNKNOWN", b"\x08\x01": "SERVING", b"\x08\x02": "NOT_SERVING"}.get(reply,
                                                                                       reply)

    def http_status(self, path):
        try:
            with urllib.request.urlopen(self.http + path, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


class Render:
    """One rendered kustomization and lookups over it."""

    def __init__(self, rel, objects):
        self.rel = rel
        self.objects = objects

    def of(self, kind):
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind, name):
        for o in self.of(kind):
            if o["metadata"]["name"] == name:
                return o
        return None

    def workloads(self):
        return [o for o in self.objects if o["kind"] in ("Deployment", "StatefulSet")]

    def pods_selected(self, selector):
        return [w for w in self.workloads()
                if labels_match(selector, w["spec"]["template"]["metadata"].get("labels", {}))]

    def secret_data(self, name):
        secret = self.get("Secret", name)
        if secret is None:
            return None
        data = dict(secret.get("stringData") or {})
        for k, v in (secret.get("data") or {}).items():
            import base64
            data[k] = base64.b64decode(v).decode()
        return data

    def configmap_data(self, name):
        cm = self.get("ConfigMap", name)
        return None if cm is None else dict(cm.get("data") or {})


def is_calleval(container):
    return container["image"].split(":")[0].split("/")[-1] == "calleval"


class RenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        assert CALLEVAL, "CALLEVAL_BIN is not set"
        cls.flags, cls.defaults, cls.roles = serve_help()
        cls.envs = {v: k for k, v in cls.flags.items()}
        cls.renders = []
        for rel in render_dirs():
            first = None
            for kubectl in kubectls():
                objects = render(kubectl, rel)
                key = sorted(yaml.safe_dump(o, sort_keys=True) for o in objects)
                if first is None:
                    first = (kubectl, key)
                    if rel not in PARTS:
                        cls.renders.append(Render(rel, objects))
                elif key != first[1]:
                    raise AssertionError("%s and %s render %s differently" %
                                         (first[0], kubectl, rel))
            print("rendered k8s/%s with %s: %d objects%s" % (
                rel, ", ".join(kubectls()), len(objects), " (a part)" if rel in PARTS else ""))
        # What each role set found in the manifests serves, asked of the real binary (unknown
        # roles are test_flags_exist's to report).
        cls.live = {}
        cls.tmp = tempfile.TemporaryDirectory()
        role_sets = {frozenset(cls.container_config(r, w, c)[1])
                     for r in cls.renders for w, c in cls.calleval_containers(r)}
        for roles in sorted((s for s in role_sets if s <= cls.roles), key=sorted):
            data_dir = os.path.join(cls.tmp.name, "-".join(sorted(roles)))
            server = Running(roles, data_dir)
            try:
                serving = {s for s in [""] + proto_services()
                           if server.grpc_port and server.health(s) == "SERVING"}
                paths = {p for p in HEALTH_PATHS if server.http and server.http_status(p) == 200}
                bogus = server.health("calleval.v1.NoSuchService") if server.grpc_port else None
            finally:
                code = server.stop()
            assert code == 0, "calleval serve --roles=%s exited %d" % (",".join(roles), code)
            if server.grpc_port:
                assert bogus == "NOT_FOUND", "an unknown health name answered %s" % bogus
            cls.live[roles] = (serving, paths)
            print("binary, --roles=%s: health SERVING for %s; HTTP 200 on %s" %
                  (",".join(sorted(roles)), sorted(serving) or "-", sorted(paths) or "-"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @staticmethod
    def calleval_containers(r):
        for w in r.workloads():
            for c in w["spec"]["template"]["spec"]["containers"]:
                if is_calleval(c):
                    yield w, c

    @classmethod
    def container_config(cls, r, w, c):
        """(flag -> value as the process sees it, roles, env name -> value or None when unknown
        (from a Secret outside the render))."""
        env = {}
        for source in c.get("envFrom", []):
            if "configMapRef" in source:
                data = r.configmap_data(source["configMapRef"]["name"])
            else:
                data = r.secret_data(source["secretRef"]["name"])
            env.update(data or {})
        for e in c.get("env", []):
            if "value" in e:
                # Kubernetes expands $(NAME) of variables defined before this one.
                env[e["name"]] = re.sub(r"\$\((\w+)\)",
                                        lambda m: env.get(m.group(1)) or m.group(0), e["value"])
            elif "fieldRef" in e["valueFrom"]:
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                assert path == "status.podIP", "a field the test does not stand in for: " + path
                env[e["name"]] = POD_IP
            else:
                ref = e["valueFrom"].get("secretKeyRef") or e["valueFrom"].get("configMapKeyRef")
                data = (r.secret_data(ref["name"]) if "secretKeyRef" in e["valueFrom"]
                        else r.configmap_data(ref["name"]))
                env[e["name"]] = None if data is None else data.get(ref["key"])
        config = {}
        for name, flag in cls.flags.items():
            if env.get(flag):
                config[name] = env[flag]
        args = list(c.get("args", []))[1:]
        i = 0
        while i < len(args):
            name, eq, value = args[i][2:].partition("=")
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                i += 1
                value = args[i]
            config[name] = value
            i += 1
        roles_value = config.get("roles", "all")
        roles = set(cls.roles) if roles_value == "all" else {
            x.strip() for x in roles_value.split(",") if x.strip()}
        return config, roles, env

    def each_container(self):
        return [(r, w, c) for r in self.renders for w, c in self.calleval_containers(r)]

    # Flags and environment.

    def test_flags_exist(self):
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                self.assertEqual(c.get("command"), ["calleval"])
                self.assertEqual(c["args"][0], "serve")
                for arg in c["args"][1:]:
                    if arg.startswith("--"):
                        self.assertTrue(arg[2:].split("=")[0] in self.flags,
                                        "unknown flag " + arg)
                _, roles, _ = self.container_config(r, w, c)
                self.assertTrue(roles)
                self.assertLessEqual(roles, self.roles, "unknown roles")

    def test_env_names_exist(self):
        for name, env in self.flags.items():
            self.assertEqual(env, "CALLEVAL_" + name.upper().replace("-", "_"))
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                names = [e["name"] for e in c.get("env", [])]
                for source in c.get("envFrom", []):
                    ref = source.get("configMapRef") or source.get("secretRef")
                    data = (r.configmap_data(ref["name"]) if "configMapRef" in source
                            else r.secret_data(ref["name"]))
                    if data is None:
                        self.assertTrue(ref.get("optional"), "envFrom %s is not in the render and "
                                        "not optional" % ref["name"])
                        continue
                    names += list(data)
                for name in names:
                    self.assertTrue(name in self.envs or name in OTHER_ENV,
                                    "%s is no flag's environment variable" % name)

    def test_references_exist(self):
        for r in self.renders:
            for w in r.workloads():
                spec = w["spec"]["template"]["spec"]
                with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                    refs = []  # (kind, name, key or None, optional)
                    for c in spec["containers"]:
                        for source in c.get("envFrom", []):
                            if "configMapRef" in source:
                                ref = source["configMapRef"]
                                refs.append(("ConfigMap", ref["name"], None, ref.get("optional")))
                            else:
                                ref = source["secretRef"]
                                refs.append(("Secret", ref["name"], None, ref.get("optional")))
                        for e in c.get("env", []):
                            for key, kind in (("secretKeyRef", "Secret"),
                                              ("configMapKeyRef", "ConfigMap")):
                                ref = e.get("valueFrom", {}).get(key)
                                if ref:
                                    refs.append((kind, ref["name"], ref["key"],
                                                 ref.get("optional")))
                        volumes = {v["name"] for v in spec.get("volumes", [])}
                        volumes |= {t["metadata"]["name"]
                                    for t in w["spec"].get("volumeClaimTemplates", [])}
                        for m in c.get("volumeMounts", []):
                            self.assertIn(m["name"], volumes)
                    for v in spec.get("volumes", []):
                        if "secret" in v:
                            refs.append(("Secret", v["secret"]["secretName"], None,
                                         v["secret"].get("optional")))
                        if "persistentVolumeClaim" in v:
                            self.assertIsNotNone(r.get("PersistentVolumeClaim",
                                                       v["persistentVolumeClaim"]["claimName"]))
                    for kind, name, key, optional in refs:
                        obj = r.get(kind, name)
                        if obj is None:
                            external = (kind == "Secret" and name in EXTERNAL_SECRETS and
                                        r.rel not in SELF_CONTAINED)
                            self.assertTrue(optional or external,
                                            "%s %s is not in the render" % (kind, name))
                            continue
                        if key is not None:
                            data = (r.secret_data(name) if kind == "Secret"
                                    else r.configmap_data(name))
                            self.assertTrue(optional or key in data,
                                            "%s %s has no key %s" % (kind, name, key))
            for ing in r.of("Ingress"):
                for t in ing["spec"].get("tls", []):
                    self.assertTrue(r.get("Secret", t["secretName"]) or
                                    (t["secretName"] in EXTERNAL_SECRETS and
                                     r.rel not in SELF_CONTAINED))

    def test_files_come_from_secrets(self):
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                config, _, _ = self.container_config(r, w, c)
                volumes = {v["name"]: v for v in w["spec"]["template"]["spec"].get("volumes", [])}
                for name, value in config.items():
                    if not name.endswith("-file") or not value:
                        continue
                    directory, base = os.path.split(value)
                    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == directory]
                    self.assertEqual(len(mounts), 1, "--%s=%s: no volume mounted at %s" %
                                     (name, value, directory))
                    volume = volumes[mounts[0]["name"]]
                    self.assertIn("secret", volume, "--%s: not from a Secret" % name)
                    data = r.secret_data(volume["secret"]["secretName"])
                    if data is not None:
                        self.assertIn(base, data, "--%s: the Secret has no key %s" % (name, base))
                        if name == "internal-credential-file":
                            self.assertRegex(data[base].strip(), r"^[\x21-\x7e]{16,}$")
                        if name == "signing-key-file":
                            self.assertGreaterEqual(len(data[base].encode()), 16)
                        if name == "credentials-key-file":
                            # Read as raw bytes: a trailing newline would make it 33.
                            self.assertEqual(len(data[base].encode()), 32,
                                             "the credentials key must be exactly 32 bytes")

    # What is shared between pods, and how.

    @staticmethod
    def env_source(c, name):
        """How a container sets NAME: its env entry without the name, or None."""
        for e in c.get("env", []):
            if e["name"] == name:
                return json.dumps({k: v for k, v in e.items() if k != "name"}, sort_keys=True)
        return None

    @staticmethod
    def file_source(w, c, path):
        """(Secret, key) a file path comes from, or None when no Secret is mounted there."""
        directory, base = os.path.split(path)
        volumes = {v["name"]: v for v in w["spec"]["template"]["spec"].get("volumes", [])}
        for m in c.get("volumeMounts", []):
            if m["mountPath"] == directory and "secret" in volumes.get(m["name"], {}):
                return volumes[m["name"]]["secret"]["secretName"], base
        return None

    def test_shared_state(self):
        for r in self.renders:
            recordings, files = {}, {}
            for w, c in self.calleval_containers(r):
                name = w["metadata"]["name"]
                with self.subTest(render=r.rel, workload=name):
                    config, roles, env = self.container_config(r, w, c)
                    data_dir = config.get("data-dir", self.defaults.get("data-dir"))
                    volumes = {v["name"]: v for v in w["spec"]["template"]["spec"].get("volumes",
                                                                                       [])}
                    mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == data_dir]
                    self.assertEqual(len(mounts), 1, "no volume at the data dir " + data_dir)
                    shared = "persistentVolumeClaim" in volumes[mounts[0]["name"]]
                    if roles & RECORDING_ROLES:
                        source = tuple(self.env_source(c, v) for v in (
                            "CALLEVAL_RECORDINGS_URL", "AWS_ACCESS_KEY_ID",
                            "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"))
                        recordings.setdefault(source, []).append(name)
                    if not shared and roles & RECORDING_ROLES:
                        # Recordings in this pod's own dir would be lost with it and unseen by
                        # the other roles.
                        self.assertIn("CALLEVAL_RECORDINGS_URL", env, "/data is this pod's own: "
                                      "the recordings must be in a store every pod reaches")
                        url = env["CALLEVAL_RECORDINGS_URL"]
                        if url is not None:
                            self.assertTrue(url.startswith("s3://"), url)
                        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                            self.assertIn(key, env, "the store's keys")
                    for flag, needed_by in SHARED_FILES.items():
                        wanted = needed_by is None or roles & needed_by
                        value = config.get(flag)
                        if not shared and wanted:
                            # A key made in a per-pod dir differs from every other pod's.
                            self.assertTrue(value, "--%s: /data is this pod's own, the key must "
                                            "come from a Secret" % flag)
                        if value:
                            files.setdefault(flag, {}).setdefault(
                                self.file_source(w, c, value), []).append(name)
            with self.subTest(render=r.rel):
                self.assertLessEqual(len(recordings), 1,
                                     "the roles disagree on the recordings store: %s" % recordings)
                for flag, sources in files.items():
                    self.assertEqual(len(sources), 1, "--%s differs between pods: %s" %
                                     (flag, sources))

    def test_production_has_no_shared_volume(self):
        r = next(x for x in self.renders if x.rel == "overlays/production")
        self.assertEqual(r.of("PersistentVolumeClaim"), [], "an unused claim still provisions")
        for w in r.workloads():
            spec = w["spec"]["template"]["spec"]
            with self.subTest(workload=w["metadata"]["name"]):
                self.assertNotIn("affinity", spec, "the pods spread over nodes")
                self.assertNotIn("calleval/data", w["spec"]["template"]["metadata"]["labels"])
                for v in spec.get("volumes", []):
                    self.assertNotIn("persistentVolumeClaim", v)

    # Ports and probes.

    def test_ports_match_listen_addresses(self):
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                config, roles, _ = self.container_config(r, w, c)
                ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
                expected = {}
                if roles - {"edge"}:
                    expected["grpc"] = config.get("grpc-addr", self.defaults["grpc-addr"])
                if "edge" in roles:
                    expected["http"] = config.get("http-addr", self.defaults["http-addr"])
                # A runs process without an edge serves its phone lines on its media listener,
                # which the edge pods must reach at the address the lines' tokens advertise:
                # this pod's IP and the declared port.
                media = config.get("media-addr", "127.0.0.1:0")
                if "runs" in roles and "edge" not in roles and media != "off":
                    expected["media"] = media
                    self.assertEqual(config.get("media-advertise-addr"),
                                     "%s:%d" % (POD_IP, host_port(media)[1]),
                                     "the media listener is advertised at the pod's IP")
                # Every process serves its metrics; the scrape annotations name that port.
                expected["metrics"] = config.get("admin-addr", self.defaults["admin-addr"])
                annotations = w["spec"]["template"]["metadata"].get("annotations", {})
                self.assertEqual(annotations.get("prometheus.io/scrape"), "true")
                self.assertEqual(annotations.get("prometheus.io/path"), "/metrics")
                self.assertEqual(annotations.get("prometheus.io/port"),
                                 str(host_port(expected["metrics"])[1]), "scraped port")
                self.assertEqual(set(ports), set(expected), "declared ports vs ports listened on")
                for name, addr in expected.items():
                    host, port = host_port(addr)
                    self.assertIn(host, ("0.0.0.0", "", "::"), "--%s-addr %s is not reachable "
                                  "from outside the pod" % (name, addr))
                    self.assertEqual(ports[name], port, "port %s" % name)

    def test_probes_match_the_binary(self):
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                _, roles, _ = self.container_config(r, w, c)
                self.assertIn(frozenset(roles), self.live, "unknown roles")
                serving, paths = self.live[frozenset(roles)]
                ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
                registered = serving - {""}
                for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                    probe = c.get(kind)
                    self.assertIsNotNone(probe, "no " + kind)
                    if "grpc" in probe:
                        self.assertEqual(probe["grpc"]["port"], ports.get("grpc"), kind + " port")
                        service = probe["grpc"].get("service", "")
                        self.assertIn(service, serving, "%s: the process does not serve health "
                                      "name %r (it serves %s)" % (kind, service, sorted(serving)))
                        if registered:
                            self.assertIn(service, registered, "%s: probe the role's own service" %
                                          kind)
                    elif "httpGet" in probe:
                        port = probe["httpGet"]["port"]
                        self.assertEqual(ports.get(port, port), ports.get("http"), kind + " port")
                        self.assertIn(probe["httpGet"]["path"], paths, kind + " path")
                    else:
                        self.fail("%s is neither gRPC nor HTTP" % kind)

    # Services and the addresses that name them.

    def test_services_select_ports(self):
        for r in self.renders:
            for svc in r.of("Service"):
                with self.subTest(render=r.rel, service=svc["metadata"]["name"]):
                    pods = r.pods_selected(svc["spec"]["selector"])
                    self.assertTrue(pods, "selects no pod")
                    for p in svc["spec"]["ports"]:
                        target = p.get("targetPort", p["port"])
                        for w in pods:
                            ports = [q for c in w["spec"]["template"]["spec"]["containers"]
                                     for q in c.get("ports", [])]
                            self.assertTrue(any(target in (q.get("name"), q["containerPort"])
                                                for q in ports),
                                            "%s has no port %s" % (w["metadata"]["name"], target))
            for ing in r.of("Ingress"):
                for rule in ing["spec"]["rules"]:
                    for path in rule["http"]["paths"]:
                        backend = path["backend"]["service"]
                        svc = r.get("Service", backend["name"])
                        self.assertIsNotNone(svc, "Ingress backend %s" % backend["name"])
                        self.assertTrue(any(backend["port"].get("name") == p.get("name") or
                                            backend["port"].get("number") == p["port"]
                                            for p in svc["spec"]["ports"]))

    def service_target(self, r, addr):
        """The workloads behind HOST:PORT when HOST is a Service of the render."""
        host, port = host_port(addr)
        name = host.split(".")[0]
        if host != name and not host.startswith(name + "." + NAMESPACE + "."):
            return None
        svc = r.get("Service", name)
        self.assertIsNotNone(svc, "no Service %s" % name)
        matching = [p for p in svc["spec"]["ports"] if p["port"] == port]
        self.assertTrue(matching, "Service %s has no port %d" % (name, port))
        return r.pods_selected(svc["spec"]["selector"])

    def test_role_addresses(self):
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                config, roles, _ = self.container_config(r, w, c)
                for role in sorted(self.roles):
                    addr = config.get(role + "-addr")
                    if not addr:
                        continue
                    self.assertNotIn(role, roles, "--%s-addr set where the role runs" % role)
                    pods = self.service_target(r, addr)
                    self.assertTrue(pods, "--%s-addr %s reaches no pod" % (role, addr))
                    for p in pods:
                        for pc in p["spec"]["template"]["spec"]["containers"]:
                            self.assertIn(role, self.container_config(r, p, pc)[1],
                                          "--%s-addr %s reaches %s" % (role, addr,
                                                                       p["metadata"]["name"]))

    def test_database_url(self):
        for r, w, c in self.each_container():
            with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                config, _, env = self.container_config(r, w, c)
                url = config.get("database-url")
                if r.rel in SELF_CONTAINED and "CALLEVAL_DATABASE_URL" in env:
                    self.assertIsNotNone(env["CALLEVAL_DATABASE_URL"], "database URL not in render")
                if not url or not url.startswith(("postgres://", "postgresql://")):
                    continue
                m = re.match(r"^postgres(?:ql)?://([^:@/]+)(?::([^@/]*))?@([^/:]+):?(\d*)/([^?]+)",
                             url)
                self.assertIsNotNone(m, "database URL " + url)
                user, password, host, port, database = m.groups()
                pods = self.service_target(r, "%s:%s" % (host, port or 5432))
                if pods is None:
                    continue
                self.assertEqual(len(pods), 1)
                pg = pods[0]["spec"]["template"]["spec"]["containers"][0]
                pg_env = {}
                for e in pg.get("env", []):
                    if "value" in e:
                        pg_env[e["name"]] = e["value"]
                    else:
                        ref = e["valueFrom"]["secretKeyRef"]
                        pg_env[e["name"]] = (r.secret_data(ref["name"]) or {}).get(ref["key"])
                self.assertEqual(pg_env.get("POSTGRES_USER"), user)
                self.assertEqual(pg_env.get("POSTGRES_DB"), database)
                self.assertEqual(pg_env.get("POSTGRES_PASSWORD"), password)

    # Scaling and disruption.

    def test_autoscalers_and_budgets(self):
        for r in self.renders:
            scaled = {}
            for hpa in r.of("HorizontalPodAutoscaler"):
                with self.subTest(render=r.rel, hpa=hpa["metadata"]["name"]):
                    self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
                    ref = hpa["spec"]["scaleTargetRef"]
                    target = r.get(ref["kind"], ref["name"])
                    self.assertIsNotNone(target, "targets %s %s" % (ref["kind"], ref["name"]))
                    self.assertNotIn("replicas", target["spec"],
                                     "a fixed replica count fights the autoscaler")
                    for m in hpa["spec"]["metrics"]:
                        resource = m["resource"]["name"]
                        for c in target["spec"]["template"]["spec"]["containers"]:
                            self.assertIn(resource, c["resources"]["requests"])
                    scaled[ref["name"]] = hpa["spec"]["maxReplicas"]
            for pdb in r.of("PodDisruptionBudget"):
                with self.subTest(render=r.rel, pdb=pdb["metadata"]["name"]):
                    pods = r.pods_selected(pdb["spec"]["selector"]["matchLabels"])
                    self.assertEqual(len(pods), 1, "selects %d workloads" % len(pods))
                    name = pods[0]["metadata"]["name"]
                    self.assertTrue(pods[0]["spec"].get("replicas", 1) > 1 or
                                    scaled.get(name, 1) > 1, "%s runs one replica" % name)

    # Network policy.

    def test_network_policy(self):
        for r in self.renders:
            with self.subTest(render=r.rel):
                policies = r.of("NetworkPolicy")
                for w in r.workloads():
                    labels = w["spec"]["template"]["metadata"]["labels"]
                    ports = {p.get("name"): p["containerPort"]
                             for c in w["spec"]["template"]["spec"]["containers"]
                             for p in c.get("ports", [])}
                    mine = [p for p in policies
                            if labels_match(p["spec"]["podSelector"].get("matchLabels"), labels)]
                    if "grpc" in ports or any(is_calleval(c) for c in
                                              w["spec"]["template"]["spec"]["containers"]):
                        self.assertTrue(mine, "%s: no NetworkPolicy" % w["metadata"]["name"])
                    open_to_all, open_to_namespace, open_to_scraper = set(), set(), set()
                    for p in mine:
                        self.assertIn("Ingress", p["spec"]["policyTypes"])
                        for rule in p["spec"].get("ingress", []):
                            self.assertIn("ports", rule, "a rule without ports opens them all")
                            names = set()
                            for port in rule["ports"]:
                                names |= {n for n, v in ports.items()
                                          if port["port"] in (n, v)}
                            sources = rule.get("from")
                            if not sources:
                                open_to_all |= names
                            elif names == {"metrics"}:
                                # The scraper may live in a namespace of its own.
                                for s in sources:
                                    self.assertIn(set(s), ({"podSelector"}, {"namespaceSelector"}),
                                                  "the namespace's pods or a named namespace")
                                    if "namespaceSelector" in s:
                                        self.assertTrue(s["namespaceSelector"].get("matchLabels"),
                                                        "one named namespace, not all of them")
                                open_to_scraper |= names
                            else:
                                for s in sources:
                                    self.assertEqual(set(s), {"podSelector"},
                                                     "only pods of the namespace")
                                    if "media" in names:
                                        # Only the edge relays to the phone lines.
                                        selected = r.pods_selected(
                                            s["podSelector"].get("matchLabels"))
                                        self.assertTrue(selected)
                                        for sw in selected:
                                            for sc in sw["spec"]["template"]["spec"]["containers"]:
                                                self.assertIn("edge", self.container_config(
                                                    r, sw, sc)[1], "media opened to a non-edge")
                                open_to_namespace |= names
                    if mine:
                        self.assertNotIn("grpc", open_to_all, "gRPC open to all")
                        if "grpc" in ports:
                            self.assertIn("grpc", open_to_namespace)
                        if "http" in ports:
                            self.assertIn("http", open_to_all)
                        if "media" in ports:
                            # The edge relays the carriers' traffic there; nobody else.
                            self.assertNotIn("media", open_to_all, "phone media open to all")
                            self.assertIn("media", open_to_namespace)
                        self.assertNotIn("metrics", open_to_all, "metrics open to all")
                        if "metrics" in ports:
                            self.assertIn("metrics", open_to_scraper)

    # Images and security.

    def test_images_and_security(self):
        for r in self.renders:
            namespaces = r.of("Namespace")
            for o in r.objects:
                if o["kind"] != "Namespace":
                    self.assertEqual(o["metadata"].get("namespace"), NAMESPACE,
                                     "%s %s" % (o["kind"], o["metadata"]["name"]))
            for w in r.workloads():
                spec = w["spec"]["template"]["spec"]
                with self.subTest(render=r.rel, workload=w["metadata"]["name"]):
                    pod_sc = spec.get("securityContext", {})
                    self.assertTrue(pod_sc.get("runAsNonRoot"))
                    for c in spec["containers"]:
                        if not is_calleval(c):
                            self.assertIn(c["image"], OTHER_IMAGES)
                            continue
                        self.assertEqual(c["image"], "calleval:latest")
                        self.assertEqual(pod_sc.get("runAsUser"), 10001)
                        self.assertEqual(pod_sc.get("runAsGroup"), 10001)
                        sc = c["securityContext"]
                        self.assertFalse(sc["allowPrivilegeEscalation"])
                        self.assertTrue(sc["readOnlyRootFilesystem"])
                        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
                        _, roles, _ = self.container_config(r, w, c)
                        unconfined = pod_sc.get("seccompProfile", {}).get("type") == "Unconfined"
                        if unconfined:
                            self.assertTrue(roles & SANDBOX_ROLES,
                                            "Unconfined without the code sandbox")
                            for ns in namespaces:
                                self.assertNotIn(
                                    ns["metadata"]["labels"].get(
                                        "pod-security.kubernetes.io/enforce"),
                                    ("restricted", "baseline"),
                                    "the namespace refuses Unconfined pods")
                        else:
                            self.assertEqual(pod_sc["seccompProfile"]["type"], "RuntimeDefault")
                    # The data volume is ReadWriteOnce: every pod mounting it on the same node.
                    claims = [v["persistentVolumeClaim"]["claimName"]
                              for v in spec.get("volumes", []) if "persistentVolumeClaim" in v]
                    if any("ReadWriteOnce" in r.get("PersistentVolumeClaim", n)["spec"]
                           ["accessModes"] for n in claims):
                        labels = w["spec"]["template"]["metadata"]["labels"]
                        terms = spec["affinity"]["podAffinity"][
                            "requiredDuringSchedulingIgnoredDuringExecution"]
                        self.assertTrue(any(
                            t["topologyKey"] == "kubernetes.io/hostname" and
                            labels_match(t["labelSelector"]["matchLabels"], labels)
                            for t in terms), "no affinity to the volume's node")

    # The layout running.

    def test_per_role_layout_scores_a_call(self):
        """try-it's Deployments, each one process with its arguments and environment as
        rendered, on loopback: each Service becomes the port of the process it selects,
        PostgreSQL a shared SQLite file (the data dir, as the volume is shared), the keys of the
        Secret calleval-internal files. A text call ingested at the edge must be scored."""
        r = next(x for x in self.renders if x.rel == "overlays/try-it")
        workloads = list(self.calleval_containers(r))
        grpc_ports = {w["metadata"]["name"]: free_port() for w, _ in workloads}
        by_service = {}
        for svc in r.of("Service"):
            pods = r.pods_selected(svc["spec"]["selector"])
            if len(pods) == 1 and pods[0]["metadata"]["name"] in grpc_ports:
                by_service[svc["metadata"]["name"]] = grpc_ports[pods[0]["metadata"]["name"]]
        tmp = tempfile.TemporaryDirectory()
        data_dir = os.path.join(tmp.name, "data")
        # The files the pods read from the mounted Secret calleval-internal, by variable.
        secret_files = {}
        for variable, secret_key in (("CALLEVAL_INTERNAL_CREDENTIAL_FILE", "internal-credential"),
                                     ("CALLEVAL_SIGNING_KEY_FILE", "signing-key"),
                                     ("CALLEVAL_CREDENTIALS_KEY_FILE", "credentials-key")):
            secret_files[variable] = os.path.join(tmp.name, secret_key)
            with open(secret_files[variable], "w") as f:
                f.write(r.secret_data("calleval-internal")[secret_key])
        http = "127.0.0.1:%d" % free_port()
        running = []
        try:
            for w, c in workloads:
                _, roles, env = self.container_config(r, w, c)
                env = {k: v for k, v in env.items() if v is not None}
                env.pop("CALLEVAL_DATABASE_URL", None)
                for name, value in list(env.items()):
                    flag = self.envs.get(name, "")
                    if flag.endswith("-addr") and flag[:-5] in self.roles:
                        self.assertIn(value.split(":")[0], by_service, name)
                        env[name] = "127.0.0.1:%d" % by_service[value.split(":")[0]]
                for variable, path in secret_files.items():
                    if variable in env:
                        env[variable] = path
                # The media listener on loopback and a free port, advertised as bound.
                if "CALLEVAL_MEDIA_ADDR" in env:
                    env["CALLEVAL_MEDIA_ADDR"] = "127.0.0.1:0"
                    env.pop("CALLEVAL_MEDIA_ADVERTISE_ADDR", None)
                env.update(CALLEVAL_DATA_DIR=data_dir,
                           CALLEVAL_INTERNAL_CREDENTIAL_FILE=secret_files[
                               "CALLEVAL_INTERNAL_CREDENTIAL_FILE"],
                           CALLEVAL_GRPC_ADDR="127.0.0.1:%d" % grpc_ports[w["metadata"]["name"]],
                           CALLEVAL_HTTP_ADDR=http, CALLEVAL_PUBLIC_BASE_URL="http://" + http,
                           CALLEVAL_ADMIN_ADDR="127.0.0.1:0", CALLEVAL_ACCESS_LOG="false")
                running.append((w["metadata"]["name"],
                                Running(roles, data_dir, args=c["args"], env=env)))
            with open(os.path.join(data_dir, "bootstrap-key")) as f:
                key = f.read().strip()

            def call(method, path, body=None):
                request = urllib.request.Request(
                    "http://%s%s" % (http, path), method=method,
                    data=None if body is None else json.dumps(body).encode(),
                    headers={"Authorization": "Bearer " + key})
                with urllib.request.urlopen(request, timeout=10) as response:
                    return json.loads(response.read())

            agent = call("POST", "/api/v1/agents", {
                "name": "Support bot", "phone_number": "+14155550123", "language_id": 1,
                "instructions": "Help callers with their cards."})
            call("GET", "/api/v1/metrics")
            call("POST", "/api/public/v1/calls", {
                "call_identifier": "k8s-1", "agent_id": agent["id"], "transcript": [
                    {"role": "AI Assistant", "content": "Hello!", "start_time": 0.4,
                     "end_time": 1.2},
                    {"role": "User", "content": "My card is lost.", "start_time": 1.9,
                     "end_time": 3.0}]})
            status = None
            for _ in range(60):
                status = call("GET", "/api/public/v1/calls/k8s-1")["analysis_status"]
                if status in ("completed", "failed", "skipped"):
                    break
                time.sleep(0.5)
            self.assertEqual(status, "completed")
            print("try-it's %d Deployments as processes: a text call ingested at the edge, "
                  "scored (%s)" % (len(running), status))
        finally:
            for name, server in running:
                self.assertEqual(server.stop(), 0, "%s did not exit 0" % name)
            tmp.cleanup()

    def test_objects_match_the_kubernetes_api(self):
        tsc = os.path.join(K8S_TOOLS, "node_modules", "typescript", "bin", "tsc")
        types = os.path.join(K8S_TOOLS, "node_modules", "kubernetes-types")
        self.assertTrue(os.path.exists(tsc) and os.path.isdir(types),
                        "tools/k8s is not installed: run scripts/setup (npm ci in tools/k8s)")
        renders = list(self.renders)
        for rel in sorted(PARTS):
            renders.append(Render(rel, render(kubectls()[0], rel)))
        source, objects = typescript_of(renders)
        with tempfile.TemporaryDirectory(dir=K8S_TOOLS) as tmp:
            # Inside tools/k8s, so that "kubernetes-types/..." resolves to its node_modules.
            path = os.path.join(tmp, "objects.ts")
            with open(path, "w") as f:
                f.write(source)
            out = subprocess.run(
                ["node", tsc, "--noEmit", "--strict", "--target", "es2020", "--module", "es2020",
                 "--moduleResolution", "node", path],
                capture_output=True, text=True, timeout=120)
        # "objects.ts(LINE,COL): error TS...": say which object of which render it is in.
        named = []
        for line in (out.stdout + out.stderr).strip().splitlines():
            m = re.match(r".*objects\.ts\((\d+),\d+\)", line)
            if m:
                at = int(m.group(1))
                owners = [name for first, name in objects if first <= at]
                line = "%s: %s" % (owners[-1] if owners else "imports", line)
            named.append(line)
        self.assertEqual(out.returncode, 0, "\n".join(named))
        print("type-checked %d objects of %d renders against kubernetes-types 1.30" %
              (len(objects), len(renders)))

    def test_dockerfile(self):
        with open(os.path.join(ROOT, "Dockerfile")) as f:
            text = f.read()
        lines = [l.strip() for l in re.sub(r"\\\n", " ", text).splitlines()
                 if l.strip() and not l.strip().startswith("#")]
        stages = []
        for l in lines:
            if l.upper().startswith("FROM "):
                stages.append([l])
            elif stages:
                stages[-1].append(l)
        self.assertGreaterEqual(len(stages), 2, "multi-stage")
        self.assertRegex(stages[0][0], r"^FROM debian:12 ")
        runtime = stages[-1]
        self.assertEqual(runtime[0], "FROM debian:12-slim")
        users = [l.split()[1] for l in runtime if l.upper().startswith("USER ")]
        self.assertTrue(users and re.match(r"^10001(:10001)?$", users[-1]), users)
        copied = " ".join(l for l in runtime if l.upper().startswith("COPY --FROM="))
        for binary in ("calleval", "callevalctl"):
            self.assertRegex(copied, r"/%s(\s|$)" % binary)
        for l in runtime:
            if l.upper().startswith("ENV "):
                for name in re.findall(r"\b(CALLEVAL_[A-Z0-9_]+)=", l):
                    self.assertIn(name, self.envs)
        self.assertTrue(os.path.exists(os.path.join(ROOT, ".dockerignore")))
        # scripts/setup runs `npm ci` in edge/dashboard and each tools/ dir with a lock: the
        # build stage must have copied their package files before it runs setup, or the image
        # build fails there.
        with open(os.path.join(ROOT, "scripts", "setup")) as f:
            self.assertIn("for lock in edge/dashboard/package-lock.json tools/*/package-lock.json",
                          f.read())
        tools_dirs = ["edge/dashboard"] + sorted(
            os.path.relpath(os.path.dirname(p), ROOT)
            for p in glob.glob(os.path.join(ROOT, "tools", "*", "package-lock.json")))
        self.assertIn("tools/k8s", tools_dirs)
        build = stages[0]
        setup_at = next(i for i, l in enumerate(build) if "scripts/setup" in l and
                        l.upper().startswith("RUN "))
        copied_before = " ".join(l for l in build[:setup_at] if l.upper().startswith("COPY "))
        for tools_dir in tools_dirs:
            for name in ("package.json", "package-lock.json"):
                self.assertIn("%s/%s" % (tools_dir, name), copied_before)

if __name__ == "__main__":
    for k in kubectls():
        if shutil.which(k) is None:
            raise SystemExit("kubectl not found: %s (Debian: kubernetes-client)" % k)
    unittest.main(verbosity=2)
