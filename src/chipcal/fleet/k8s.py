"""`chipcal fleet manifest --k8s`: a Kubernetes Indexed Job that runs one fleet task per GPU node.

- `completionMode: Indexed`, `completions` = `parallelism` = the node count: each pod gets its
  index in $JOB_COMPLETION_INDEX, which `chipcal fleet task` reads (Kubernetes batch/v1 Job,
  "Completion mode", https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode).
- A required pod anti-affinity on `kubernetes.io/hostname` against the Job's own pods: no two
  tasks on one node, the Kubernetes form of Slurm's `--exclusive`.
- The GPUs of the node requested (`nvidia.com/gpu`, the NVIDIA device plugin's resource name).
- The store is a volume (a PersistentVolumeClaim, ReadWriteMany: every node writes into it),
  mounted at STORE_MOUNT; $CHIPCAL_NODE is the pod's node (the downward API's spec.nodeName),
  since a pod's hostname is the pod's own name (measure.node).
- `restartPolicy: OnFailure`: a task restarted on its node continues its run from the journal
  in the store (fleet.task), as a requeued Slurm task does.

Written with PyYAML (the `fleet` extra), whose output `kubectl apply -f` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chipcal.fleet.store import FleetError

STORE_MOUNT = "/store"
APP_LABEL = "chipcal-fleet"


@dataclass(frozen=True)
class K8sRequest:
    nodes: int
    image: str
    claim: str                      # the PersistentVolumeClaim holding the store
    gpus_per_node: int
    submission: str                 # the submission id the pods write their state under
    calibrate_args: tuple[str, ...] = ()
    namespace: str | None = None


def job(request: K8sRequest) -> dict:
    """The Indexed Job as a dict (module docstring: each field and why)."""
    selector = {"matchLabels": {"app": APP_LABEL, "chipcal/submission": request.submission}}
    container = {
        "name": "chipcal",
        "image": request.image,
        "command": ["chipcal", "fleet", "task", "--store", STORE_MOUNT, "--submission", request.submission,
                    "--tasks", str(request.nodes), "--", *request.calibrate_args],
        "env": [{"name": "CHIPCAL_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "volumeMounts": [{"name": "store", "mountPath": STORE_MOUNT}],
    }
    if request.gpus_per_node:
        container["resources"] = {"limits": {"nvidia.com/gpu": request.gpus_per_node}}
    metadata = {"name": f"chipcal-fleet-{request.submission.lower()}"[:63].rstrip("-"),
                "labels": {"app": APP_LABEL, "chipcal/submission": request.submission}}
    if request.namespace:
        metadata["namespace"] = request.namespace
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed",
            "completions": request.nodes,
            "parallelism": request.nodes,
            "backoffLimit": 2 * request.nodes,
            "template": {
                "metadata": {"labels": dict(metadata["labels"])},
                "spec": {
                    "restartPolicy": "OnFailure",
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}},
                    "containers": [container],
                    "volumes": [{"name": "store", "persistentVolumeClaim": {"claimName": request.claim}}],
                },
            },
        },
    }


def manifest(request: K8sRequest) -> str:
    """The Job as YAML; FleetError where PyYAML is not installed."""
    try:
        import yaml
    except ImportError:
        raise FleetError("the Kubernetes manifest needs PyYAML: pip install 'chipcal[fleet]'") from None
    return yaml.safe_dump(job(request), sort_keys=False)


def check_args(args: Sequence[str]) -> None:
    if any(a.startswith("--store") for a in args):
        raise FleetError("the manifest mounts the store itself; give the claim with --claim")
