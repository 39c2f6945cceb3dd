"""What the tests on the local cluster share (tests/cluster: the kubernetes backend on a real cluster of
three nodes, the kind cluster `peerlab cluster up` makes): the namespace and node count, what a cluster
could leave on this host, kubectl and the API server's address, the cluster store's client, a
scenario run on the cluster, the kubeconfig keys left in the temporary directory, the node groups'
spread, the shaping daemons' delay lines and a home of user nobody's own. The `cluster` fixture that
brings the cluster up is in conftest.py.
"""
from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from orchestrator.cluster import layout as L
from orchestrator.cluster import shaper
from tests.support.cli import ROOT, peerlab

NAMESPACE = "peerlab-test"


NODES = 3


def host_state() -> set[str]:
    """What a cluster could leave on this host: interfaces, iptables rules and chains, cgroups, mounts,
    network namespaces, Docker's containers, volumes and networks."""
    def lines(*argv: str) -> list[str]:
        return subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()
    found = {f"link {line.split(': ')[1].split('@')[0]}" for line in lines("ip", "-o", "link")}
    for save in ("iptables-save", "ip6tables-save"):
        found |= {f"{save} {line.split(' [')[0]}" for line in lines(save) if line[:1] in (":", "-")}
    found |= {f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/*") if p.is_dir()}
    found |= {f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/*/*") if p.is_dir()}
    found |= {f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    found |= {f"netns {line.split()[0]}" for line in lines("ip", "netns", "list") if line.strip()}
    for what in (("ps", "-aq"), ("volume", "ls", "-q"), ("network", "ls", "-q")):
        found |= {f"docker {what[0]} {line}" for line in lines("docker", *what)}
    budget = Path("/sys/fs/cgroup/cpu/docker/cpu.rt_runtime_us")  # RT group scheduling: Docker's budget
    return found | ({f"docker's rt budget {budget.read_text().strip()}"} if budget.exists() else set())


def api_server(env: dict[str, str]) -> tuple[str, str]:
    """The API server's address and its CA (PEM) from the cluster's kubeconfig."""
    config = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    cluster = config["clusters"][0]["cluster"]
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"]).decode()


def kubectl(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(ROOT / ".tools" / "bin" / "kubectl"), *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    assert not check or done.returncode == 0, done.stderr
    return done


def store_client(s3: dict[str, str]):
    import boto3
    return boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"], region_name=s3["AWS_DEFAULT_REGION"],
                        aws_access_key_id=s3["AWS_ACCESS_KEY_ID"], aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"])


def run_on_cluster(env: dict[str, str], scenario: Path, tmp_path: Path, *extra: str) -> Path:
    text = scenario.read_text().replace("file://./runs", f"file://{tmp_path}/runs")
    copy = tmp_path / scenario.name
    copy.write_text(text)
    keys_before = key_files()
    done = peerlab("run", str(copy), "--backend", "kubernetes", "--no-report", *extra, timeout=1200,
                   env={**os.environ, **env})
    print(done.stderr[-2500:])
    assert done.returncode == 0, done.stderr[-3000:]
    # the run's processes (its probes' bridges through the exec API among them, which end by a kill)
    # leave none of the kubeconfig's keys behind in the temporary directory
    assert key_files() - keys_before == set()
    return Path(done.stdout.strip().splitlines()[-1])


def key_files() -> set[Path]:
    """Files of the temporary directory that hold a private key (the kube client library writes the
    kubeconfig's certificates and key for its TLS: by default there, in a run into the orchestrator's
    peerlab-kube-* directory, which the orchestrator removes as it ends)."""
    found = set()
    tmp = Path(tempfile.gettempdir())
    for path in [*tmp.glob("tmp*"), *tmp.glob("peerlab-kube-*/*")]:
        try:
            if path.is_file():
                with path.open("rb") as f:
                    if b"PRIVATE KEY" in f.read(100):
                        found.add(path)
        except OSError:
            continue
    return found


def assert_spread(manifest: dict) -> None:
    """Each node group (implementation) spread evenly over the cluster's nodes, as manifest.clock.machines
    records where each pod ran; each cluster node with its own measured offset."""
    where = {node: machine for machine, members in manifest["clock"]["machines"].items() for node in members}
    assert sorted(manifest["clock"]["machines"]) == L.node_names(NODES)
    groups: dict[str, list[str]] = {}
    for node in manifest["plan"]["nodes"]:
        groups.setdefault(node["implementation"], []).append(where[node["id"]])
    for implementation, machines in groups.items():
        counts = [machines.count(m) for m in L.node_names(NODES)]
        assert max(counts) - min(counts) <= 1, (implementation, counts)
    offsets = manifest["clock"]["offsets_ns"]
    for machine, members in manifest["clock"]["machines"].items():
        assert len({offsets[n] for n in members}) == 1, machine  # one clock per cluster node


DELAY_LINES = ("import os\n"
               "for p in os.listdir('/proc'):\n"
               "    try: argv = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
               "    except OSError: continue\n"
               "    if b'peerlab-delayline' in argv[0]: print(p)\n")


def delay_lines(env: dict[str, str]) -> dict[str, list[str]]:
    """cluster node -> the delay line processes its shaping daemon runs."""
    daemons = json.loads(kubectl(env, "get", "pods", "-n", shaper.NAMESPACE, "-l", "app.kubernetes.io/name=peerlab-shaper",
                                 "-o", "json").stdout)["items"]
    return {d["spec"]["nodeName"]: kubectl(env, "exec", "-n", shaper.NAMESPACE, d["metadata"]["name"], "--", "python3", "-c",
                                           DELAY_LINES).stdout.split() for d in daemons}


NOBODY = pwd.getpwnam("nobody")
AS_NOBODY = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups", "--inh-caps=-all"]


def nobodys_home(request, env: dict[str, str], scenario: str) -> tuple[Path, dict[str, str]]:
    """A home of user nobody's own holding the scenario (its store in that home) and a copy of the
    cluster's kubeconfig, and the environment an unprivileged user of the cluster runs peerlab in:
    no root, no capability, no group; a state directory in that home. The checkout and its venv must be
    readable by other users: a clone under a private home directory says so rather than pass."""
    probe = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import orchestrator.cli"], cwd=ROOT,
                           capture_output=True, text=True)
    assert probe.returncode == 0, ("user nobody cannot run this checkout's Python: clone it where other "
                                   f"users can read it ({probe.stderr.strip()[-200:]})")
    home = Path(tempfile.mkdtemp(prefix="peerlab-nobody-"))  # pytest's tmp_path is root's alone
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    (home / scenario).write_text((ROOT / "scenarios" / scenario).read_text().replace(
        "file://./runs", f"file://{home}/runs"))
    shutil.copyfile(env["KUBECONFIG"], home / "kubeconfig")
    for path in (home, home / scenario, home / "kubeconfig"):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    user_env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "PEERLAB_STATE_DIR")}
    user_env.update(env, HOME=str(home), KUBECONFIG=str(home / "kubeconfig"), PYTHONDONTWRITEBYTECODE="1")
    return home, user_env
