#!/usr/bin/env bash
# The image is real: build the Dockerfile's `gpuval` stage with buildah on a Debian base made with mmdebstrap from
# Debian's packages, then run it with podman: `gpuval --help`, `gpuval health --recorded` (a recorded machine that
# passes, and one whose kernel log holds an Xid 95 burst), and the DaemonSet's own command, rendered by
# `gpuval deploy kubernetes --dry-run` inside the image and run as the pod would run it.
#
#   bash scripts/image-check.sh            # about 6 to 10 minutes on 2 cores (docs/operate.md)
#
# Nothing comes from a registry but Debian's archive and PyPI: no docker.io, no nvcr.io. Images live in a storage of
# the script's own (vfs) under GPUVAL_IMAGE_WORK (default: a new temporary folder, removed at the end).
#
# Exit status: 0 every step ran and answered as expected; 1 a step ran and failed (the build, a command in the
# image, an answer other than expected); 3 this machine cannot build or run containers, said on the last line
# (the tools cannot be installed, mmdebstrap cannot make a root file system, podman cannot start a container).
# Never 0 unless each step ran here.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
SUITE="bookworm"
MIRROR="http://deb.debian.org/debian"
BASE="localhost/gpuval-debian-base:${SUITE}"
IMAGE="localhost/gpuval:image-check"
started=$SECONDS

STORE=()
WORK="${GPUVAL_IMAGE_WORK:-}"
if [[ -z "$WORK" ]]; then
  WORK="$(mktemp -d /var/tmp/gpuval-image.XXXXXX)"
  # the storage first: it unmounts its layers and removes what buildah and podman left, then the folder can go
  trap '((${#STORE[@]})) && podman "${STORE[@]}" system reset --force >/dev/null 2>&1; rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"

say() { printf 'image-check: %s\n' "$*"; }
cannot() { say "cannot run here: $*"; exit 3; }
failed() { say "FAILED: $*"; exit 1; }

# ---- tools: Debian's packages ----------------------------------------------------------------------------------
# runc, not podman's default crun: crun 1.8 refuses a host whose cgroups are v1 with an empty v2 mount beside them
# ("cgroups in hybrid mode not supported"), as gVisor sandboxes have; runc runs there and everywhere else.
need=()
for tool in buildah podman mmdebstrap runc; do command -v "$tool" >/dev/null || need+=("$tool"); done
if ((${#need[@]})); then
  say "installing ${need[*]} (Debian packages)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${need[@]}"; } >"$WORK/apt.log" 2>&1; then
    cannot "apt-get could not install ${need[*]}: $(tail -n 1 "$WORK/apt.log")"
  fi
fi
say "$(buildah --version), $(podman --version), mmdebstrap $(mmdebstrap --version | awk '{print $2}'), runc"
# A storage of the script's own: overlay where the kernel mounts it (a container starts in a second), else vfs (a
# full copy of the image per container: tens of seconds each).
driver=overlay
podman --storage-driver=overlay --root "$WORK/probe" --runroot "$WORK/probe-run" info >/dev/null 2>&1 || driver=vfs
rm -rf "$WORK/probe" "$WORK/probe-run"
STORE=(--storage-driver="$driver" --root "$WORK/storage-$driver" --runroot "$WORK/run-$driver")

# ---- the base: Debian's packages, made with mmdebstrap -----------------------------------------------------------
# python3 and pip: the Dockerfile's `python3 -m pip install`; ca-certificates: pip's HTTPS to PyPI.
base_start=$SECONDS
if [[ ! -s "$WORK/base.tar" ]]; then
  say "mmdebstrap ${SUITE} (minbase, python3, python3-pip, ca-certificates) from ${MIRROR}"
  if ! mmdebstrap --variant=minbase --include=python3,python3-pip,ca-certificates \
        "$SUITE" "$WORK/base.tar" "$MIRROR" >"$WORK/mmdebstrap.log" 2>&1; then
    cannot "mmdebstrap could not make the root file system: $(grep -m1 -E '^E:' "$WORK/mmdebstrap.log" ||
                                                             tail -n 1 "$WORK/mmdebstrap.log")"
  fi
fi
podman "${STORE[@]}" import -q "$WORK/base.tar" "$BASE" >/dev/null ||
  cannot "podman could not import the base into its own ${driver} storage"
say "base ${BASE} in $((SECONDS - base_start)) s"

# ---- build the gpuval stage with buildah -----------------------------------------------------------------------
# chroot isolation: a build step needs no OCI runtime, no cgroups. pip reaches PyPI through this machine's network
# and trusts what this machine trusts: its CA bundle and a pip.conf naming it are mounted for the RUN steps only,
# never kept in the image.
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$WORK/pip.conf"
mounts=(--volume "$WORK/pip.conf:/etc/pip.conf:ro")
[[ -s /etc/ssl/certs/ca-certificates.crt ]] &&
  mounts+=(--volume "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro")
say "buildah build --target gpuval --build-arg BASE_IMAGE=${BASE}"
build_start=$SECONDS
if ! buildah "${STORE[@]}" build --isolation chroot --target gpuval --build-arg "BASE_IMAGE=${BASE}" \
      "${mounts[@]}" --layers=false -t "$IMAGE" -f Dockerfile . >"$WORK/build.log" 2>&1; then
  tail -n 20 "$WORK/build.log"
  failed "buildah could not build the gpuval stage (log above)"
fi
say "built ${IMAGE} in $((SECONDS - build_start)) s, $(podman "${STORE[@]}" image inspect --format '{{.Size}}' \
  "$IMAGE" | awk '{printf "%.0f MB", $1 / 1e6}')"

# ---- run it with podman -----------------------------------------------------------------------------------------
# runc with cgroupfs; the limits a container gets are this process's own (podman asks for more by default, which a
# sandbox that may not raise limits refuses: "setrlimit RLIMIT_NOFILE: Operation not permitted").
nofile="$(ulimit -Hn)"
nproc="$(ulimit -Hu)"
[[ "$nproc" == unlimited ]] || ((nproc > 32768)) && nproc=32768  # podman's own limit for its containers' processes
RUN=(podman "${STORE[@]}" --runtime runc --cgroup-manager cgroupfs run --rm --network none
     --ulimit "nofile=${nofile}:${nofile}" --ulimit "nproc=${nproc}:${nproc}")
if ! probe="$("${RUN[@]}" "$IMAGE" true 2>&1)"; then
  cannot "podman could not start a container: ${probe##*$'\n'}"
fi

# One container runs the user's commands, each one's output and exit status kept apart in a mounted folder: gpuval
# --help; health on the recorded A100 (passes); health on it with a saved /dev/kmsg of 300 Xid 95 lines (one
# finding, the catalog's action); and `gpuval deploy kubernetes --dry-run`, whose DaemonSet runs next.
mkdir -p "$WORK/out" "$WORK/node-data"
commands='
step() { name="$1"; shift; "$@" >"/out/$name.out" 2>&1; echo "$?" >"/out/$name.rc"; }
apart() { name="$1"; shift; "$@" >"/out/$name.out" 2>"/out/$name.err"; echo "$?" >"/out/$name.rc"; }  # JSON on stdout
step help gpuval --help
step recorded-pass gpuval health --recorded Standard_ND96asr_v4
python3 - /data/kmsg <<PY
import sys, yaml
from gpuval.node.recorded import recorded_data
data = recorded_data("Standard_ND96asr_v4")
data["kernel_log"] = open(sys.argv[1]).read().splitlines()
data["boot_time"] = "2026-05-01T00:00:00+00:00"
yaml.safe_dump(data, open("/tmp/xid.yaml", "w"))
PY
step recorded-xid gpuval health --recorded /tmp/xid.yaml --check xid
apart deploy gpuval deploy kubernetes --dry-run --json --image "$1"'
if ! "${RUN[@]}" --volume "$WORK/out:/out" --volume "$REPO/tests/data/kernel-log/kmsg-xid95-burst.txt:/data/kmsg:ro" \
      "$IMAGE" sh -c "$commands" sh "$IMAGE" >"$WORK/run.log" 2>&1; then
  tail -n 5 "$WORK/run.log"
  failed "the commands' container did not run to its end"
fi

expect() {  # expect NAME STATUS TEXT: the command exited STATUS and printed TEXT, and no traceback
  local name="$1" status="$2" text="$3" rc
  rc="$(cat "$WORK/out/$name.rc" 2>/dev/null)"
  if [[ "$rc" != "$status" ]] || ! grep -qF -- "$text" "$WORK/out/$name.out" || grep -q Traceback "$WORK/out/$name.out"
  then
    tail -n 15 "$WORK/out/$name.out"
    failed "$name: exit ${rc:-none} (expected $status), looked for: $text"
  fi
  say "ok: $name (exit $rc: $(grep -m1 -F -- "$text" "$WORK/out/$name.out" | sed 's/^ *//' | cut -c1-110))"
}
expect help 0 "health    Check this node"
expect recorded-pass 0 "verdict: PASS"
expect recorded-xid 1 "300 lines in 3 bursts: reset the GPU"
expect deploy 0 "-daemonset-gpuval-health.yaml"  # after the RBAC and the admission guard

# The DaemonSet as `gpuval deploy kubernetes` renders it, run as its pod runs: its command and environment, the
# node's name for the downward API's fieldRef, $(VAR) expanded as the kubelet does, its host paths (a folder here; /dev/kmsg is this machine's),
# privileged as it is for /dev/kmsg. One round of its loop: the quick checks, then --drain, which has no cluster here.
to_podman='import json, sys, yaml
rendered = json.load(open("/out/deploy.out"))["files"]
[ds] = [yaml.safe_load(text) for name, text in rendered.items() if "daemonset" in name]
pod = ds["spec"]["template"]["spec"]
[c] = pod["containers"]
env = {e["name"]: e.get("value", "image-check-node") for e in c["env"]}  # a fieldRef (GPUVAL_NODE_NAME): the node
env["GPUVAL_INTERVAL_S"] = "3600"  # one round of the loop, then the container is stopped
env.update(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443")  # what the kubelet gives a pod
paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
args = ["--privileged"] if c["securityContext"].get("privileged") else []
for m in c["volumeMounts"]:
    host = paths[m["name"]] if paths[m["name"]].startswith("/dev/") else sys.argv[1]
    args += ["--volume", host + ":" + m["mountPath"] + (":ro" if m.get("readOnly") else "")]
args += [x for k, v in env.items() for x in ("--env", k + "=" + v)]
args += ["--entrypoint", c["command"][0], c["image"]]
def expand(arg):  # the kubelet expands $(VAR) from the container env in a command
    for name, value in env.items():
        arg = arg.replace("$(" + name + ")", value)
    return arg
args += [expand(a) for a in c["command"][1:]]
sys.stdout.write("\0".join(args) + "\0")'
mapfile -d '' daemonset < <("${RUN[@]}" --volume "$WORK/out:/out:ro" "$IMAGE" \
  python3 -c "$to_podman" "$WORK/node-data" </dev/null)
((${#daemonset[@]} > 4)) || failed "could not render the DaemonSet with gpuval deploy kubernetes --dry-run"
say "DaemonSet command: ${daemonset[*]: -8}"
"${RUN[@]}" --detach --name gpuval-daemonset-check "${daemonset[@]}" >/dev/null ||
  failed "podman could not start the DaemonSet's container"
for _ in $(seq 1 90); do
  podman "${STORE[@]}" logs gpuval-daemonset-check >"$WORK/daemonset.out" 2>&1
  grep -q "verdict:" "$WORK/daemonset.out" && grep -qE "^error:|drained|tainted|unchanged" "$WORK/daemonset.out" && break
  sleep 2
done
podman "${STORE[@]}" stop -t 2 gpuval-daemonset-check >/dev/null 2>&1
podman "${STORE[@]}" rm -f gpuval-daemonset-check >/dev/null 2>&1
# no GPU here: every check that needs the driver is skipped, nothing is judged (exit 2), and --drain finds no cluster
for text in "xid " "no NVIDIA driver" "verdict: SKIPPED" "not inside a cluster"; do
  if ! grep -qF -- "$text" "$WORK/daemonset.out" || grep -q Traceback "$WORK/daemonset.out"; then
    tail -n 15 "$WORK/daemonset.out"
    failed "DaemonSet round: looked for '$text'"
  fi
done
say "ok: DaemonSet round ($(grep -m1 'verdict:' "$WORK/daemonset.out" | sed 's/^ *//' | cut -c1-100))"
say "verified in $((SECONDS - started)) s (the storage is removed next)"
