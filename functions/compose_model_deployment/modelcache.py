"""A ModelCache: what it composes on each cluster, what each cluster reports back, and
what placement learns from it.

A cache is staged per cluster as two member objects: a ReadWriteMany PersistentVolumeClaim
(named by `functions.common.modelcache.claim_name`, the one engine pods mount) and a
download Job that fills it. The downloader is a well-known image per source type, run
with its own entrypoint:

- Hugging Face and object stores (S3, GCS): KServe's storage initializer
  (`kserve/storage-initializer`, entrypoint `initializer-entrypoint <src_uri> <dest_path>`;
  `hf://org/model:revision`, `s3://`, `gs://`), which reads HF_TOKEN, the AWS_* variables
  and GOOGLE_APPLICATION_CREDENTIALS. One image for three sources keeps one behaviour
  (retries, layout) to document.
- OCI artifacts: the ORAS CLI (`ghcr.io/oras-project/oras`, `oras pull REF --output DIR`,
  `--registry-config` for a dockerconfigjson pull secret).

The Job's name carries a hash of the source and its composed-resource key does too: a
Job's pod template is immutable, so a changed source is a new Job (the old one is
deleted with its Object), downloading into the same volume.

A cache is staged only on clusters where its weights can be used: its own
clusterSelector picks them, and a ModelDeployment that references it could be placed
there (its clusterSelector selects the cluster and a pool has matching devices, room for
one replica when empty, and no taint it does not tolerate). Downloading hundreds of GiB
to a cluster that can never run the model costs storage and egress for nothing; a
selected cluster left out is named in the CacheReady condition with why.

Each cluster's phase is read from the Job as the member's API server returned it (the
Object's `status.atProvider.manifest`): Complete → Ready, Failed → Failed with the
Job's own reason and message, a running pod (`status.ready`; `active` counts pending
pods too) → Downloading, anything else (not observed yet, not created, a pod waiting for
its volume) → Pending, with the reason in words.

Pure: plain dicts in, plain values out; nothing reads the clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, Field, PlainValidator, model_validator

from functions.common import contracts, sizing, tenancy
from functions.common.conditions import Condition, condition_status
from functions.common.modelcache import (
    PHASE_DOWNLOADING,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_READY,
    claim_name,
    mount_path,
)
from functions.common.naming import (
    dns_label,
    is_object_name,
    label_value,
    resource_key,
    stable_hash,
)
from functions.common.quantity import parse_quantity
from functions.common.reader import (
    OrEmpty,
    Spec,
    Str,
    Text,
    bridge,
    object_or_refuse,
    read,
    refuse,
)
from functions.common.redact import url_credentials
from functions.compose_model_deployment.model import (
    Cluster,
    Deployment,
    Holding,
    LabelSelector,
    read_selector,
)
from functions.compose_model_deployment.placement import placeable_pool

# Pinned downloaders (see the module docstring for what each one's entrypoint takes).
STORAGE_INITIALIZER_IMAGE: Final = "kserve/storage-initializer:v0.16.0"
ORAS_IMAGE: Final = "ghcr.io/oras-project/oras:v1.2.3"
# The storage initializer runs as this user; the volume is made writable for it.
DOWNLOADER_UID: Final = 1000
DOWNLOAD_BACKOFF_LIMIT: Final = 4
SECRETS_ROOT: Final = "/var/run/secrets/modelplane"
GCS_DEFAULT_KEY: Final = "key.json"

SOURCE_HUGGING_FACE: Final = "huggingFace"
SOURCE_OBJECT_STORE: Final = "objectStore"
SOURCE_OCI: Final = "oci"
SOURCE_KINDS: Final = (SOURCE_HUGGING_FACE, SOURCE_OBJECT_STORE, SOURCE_OCI)

CACHE_READY: Final = "CacheReady"  # the condition a ModelCache carries
# Everything but Delete: a namespace outlives any one cache in it.
KEEP_ON_DELETE: Final = ("Observe", "Create", "Update", "LateInitialize")

REASON_NOT_OBSERVED: Final = "NotObserved"
REASON_NOT_APPLIED: Final = "NotApplied"
REASON_WAITING_FOR_POD: Final = "WaitingForPod"
REASON_RUNNING: Final = "Running"
REASON_COMPLETE: Final = "Complete"
REASON_NO_CLUSTERS: Final = "NoClusters"
REASON_NOT_PLACEABLE: Final = "NoPlaceableDeployment"
REASON_UNREADABLE: Final = "Unreadable"


@dataclass(frozen=True)
class ModelCache:
    name: str
    namespace: str
    source_kind: str
    source: dict  # the one source entry, as written
    size: str
    storage_class: str
    cluster_selector: LabelSelector
    retry: str = ""  # the modelplane.ai/retry annotation: a new value downloads again

    @property
    def source_hash(self) -> str:
        """What names the download Job: the source, and the retry annotation when set (a
        failed Job stays failed; a new name is a new Job)."""
        return stable_hash(
            {self.source_kind: self.source, **({"retry": self.retry} if self.retry else {})}, 8
        )


def read_cache(xr: dict) -> ModelCache:
    """A ModelCache as typed values; InputError naming the field and the rule for any
    shape it cannot be read from (wrong types included), never another exception: an
    object of another JSON type is named by its path, any other wrong type inside the
    source or selector as `spec: cannot be read`."""
    read_as = read(_ModelCache, xr)
    meta, spec = read_as.metadata, read_as.spec
    kind, entry = spec.source
    return ModelCache(
        name=meta.name,
        namespace=meta.namespace,
        source_kind=kind,
        source=entry,
        size=spec.size,
        storage_class=spec.storage_class,
        cluster_selector=spec.cluster_selector,
        retry=str((meta.annotations or {}).get(contracts.ANNOTATION_RETRY, "")),
    )


# --- What a ModelCache is read as (functions/common/reader.py) ----------------------------


def _not_the_system_namespace(namespace: Any) -> Any:
    problem = (
        tenancy.namespace_problem(namespace, "stage weights")
        if isinstance(namespace, str)
        else None
    )
    if problem is not None:
        refuse(problem)
    return namespace


class _Metadata(Spec):
    namespace: Annotated[Str, BeforeValidator(_not_the_system_namespace)] = ""
    name: Str = ""
    annotations: Any = None  # read last (_ModelCache), as it always was


def _one_source(value: Any) -> tuple[str, dict]:
    """(kind, its entry): exactly one source, an object, its fields as the XRD says."""
    source = value or {}
    given = [k for k in SOURCE_KINDS if source.get(k)]
    if len(given) != 1:
        refuse(f"needs exactly one of {', '.join(SOURCE_KINDS)} (got {', '.join(given) or 'none'})")
    kind = given[0]
    if not isinstance(source[kind], dict):
        refuse("must be an object", at=kind)
    entry = dict(source[kind])
    if kind == SOURCE_OBJECT_STORE:
        uri = str(entry.get("uri", ""))
        if not uri.startswith(("s3://", "gs://")):
            refuse("must start with s3:// or gs://", at="objectStore.uri")
        if url_credentials(uri):
            # Named, never echoed: the URI reaches every member's Job.
            refuse(
                f"must not carry credentials (found {', '.join(url_credentials(uri))}); "
                "use spec.source.objectStore.credentialsSecretRef",
                at="objectStore.uri",
            )
    _check_source(kind, entry)
    return kind, entry


def _positive_size(value: Any) -> str:
    size = str(value or "")
    try:
        if parse_quantity(size) <= 0:
            raise ValueError
    except ValueError:
        refuse(f"{size[:40]!r} is not a positive quantity")
    return size


def _selector(value: Any) -> LabelSelector:
    return read_selector(value, "spec.clusterSelector")


class _CacheSpec(Spec):
    source: Annotated[
        tuple[str, dict], PlainValidator(bridge(_one_source, cannot_read_at="spec"))
    ] = Field(default=None, validate_default=True)
    size: Annotated[str, PlainValidator(_positive_size)] = Field(
        default=None, validate_default=True
    )
    storage_class: Text = Field(default="", alias="storageClassName")
    cluster_selector: Annotated[
        LabelSelector, PlainValidator(bridge(_selector, cannot_read_at="spec"))
    ] = Field(default=None, alias="clusterSelector", validate_default=True)


class _ModelCache(Spec):
    metadata: Annotated[_Metadata, OrEmpty] = Field(default_factory=_Metadata)
    spec: Annotated[_CacheSpec, OrEmpty] = Field(default_factory=dict, validate_default=True)

    @model_validator(mode="after")
    def _annotations(self) -> _ModelCache:
        object_or_refuse(self.metadata.annotations, path="metadata.annotations")
        return self


# The XRD's patterns, checked again: every value below reaches a Job's arguments on every
# member, so nothing the schema would refuse (a URL with credentials, a flag) gets there.
_HF_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HF_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
_OBJECT_URI = re.compile(r"(s3|gs)://[a-z0-9][a-z0-9._-]{1,62}(/[^\s@]*)?")
_OCI_REFERENCE = re.compile(
    r"[a-z0-9][a-z0-9.:-]*(/[a-z0-9._-]+)+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[a-f0-9]{64})"
)
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
_PATTERNS = {
    SOURCE_HUGGING_FACE: (("repo", _HF_REPO, True), ("revision", _HF_REVISION, False)),
    SOURCE_OBJECT_STORE: (("uri", _OBJECT_URI, True),),
    SOURCE_OCI: (("reference", _OCI_REFERENCE, True),),
}
_SECRET_REFS = {
    SOURCE_HUGGING_FACE: ("tokenSecretRef", True),
    SOURCE_OBJECT_STORE: ("credentialsSecretRef", False),
    SOURCE_OCI: ("pullSecretRef", False),
}


def _check_source(kind: str, entry: dict) -> None:
    """Each field's rule, named under spec.source; the value is never quoted (it may
    hold a credential someone pasted in the wrong place)."""
    for field, pattern, needed in _PATTERNS[kind]:
        value = entry.get(field)
        if value is None and not needed:
            continue
        if not isinstance(value, str) or len(value) > 1024 or not pattern.fullmatch(value):
            refuse(f"must match {pattern.pattern}", at=f"{kind}.{field}")
    ref_field, has_key = _SECRET_REFS[kind]
    ref = entry.get(ref_field)
    if ref is None:
        return
    at = f"{kind}.{ref_field}"
    if not isinstance(ref, dict) or not is_object_name(ref.get("name")):
        refuse("must name a Secret (an RFC 1123 subdomain)", at=f"{at}.name")
    key = ref.get("key")
    if (has_key or key is not None) and not (isinstance(key, str) and _SECRET_KEY.fullmatch(key)):
        refuse("must be a Secret key ([-._a-zA-Z0-9]+)", at=f"{at}.key")


# --- What each cluster gets ---------------------------------------------------------------


def labels(cache: ModelCache) -> dict[str, str]:
    return {contracts.LABEL_MODEL_CACHE: label_value(cache.name)}


def volume_claim(cache: ModelCache) -> dict:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class:
        spec["storageClassName"] = cache.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(cache.name),
            "namespace": cache.namespace,
            "labels": labels(cache),
        },
        "spec": spec,
    }


def job_name(cache: ModelCache) -> str:
    return dns_label("modelcache", cache.name, cache.source_hash)


def _downloader(cache: ModelCache) -> tuple[dict, list[dict]]:
    """The download container and the Secret volumes it reads (credentials by reference)."""
    dest = mount_path(cache.name)
    source = cache.source
    env: list[dict] = []
    volumes: list[dict] = []
    mounts: list[dict] = [{"name": "weights", "mountPath": dest}]
    container: dict[str, Any] = {"name": "download"}
    if cache.source_kind == SOURCE_HUGGING_FACE:
        revision = str(source.get("revision") or "")
        uri = f"hf://{source['repo']}" + (f":{revision}" if revision else "")
        container.update(image=STORAGE_INITIALIZER_IMAGE, args=[uri, dest])
        token = source.get("tokenSecretRef")
        if token:
            env.append(
                {
                    "name": "HF_TOKEN",
                    "valueFrom": {
                        "secretKeyRef": {"name": str(token["name"]), "key": str(token["key"])}
                    },
                }
            )
    elif cache.source_kind == SOURCE_OBJECT_STORE:
        uri = str(source["uri"])
        container.update(image=STORAGE_INITIALIZER_IMAGE, args=[uri, dest])
        secret = source.get("credentialsSecretRef")
        if secret and uri.startswith("s3://"):
            container["envFrom"] = [{"secretRef": {"name": str(secret["name"])}}]
        elif secret:
            key = str(secret.get("key") or GCS_DEFAULT_KEY)
            directory = f"{SECRETS_ROOT}/gcs"
            volumes.append(
                {
                    "name": "gcs-credentials",
                    "secret": {
                        "secretName": str(secret["name"]),
                        "items": [{"key": key, "path": key}],
                    },
                }
            )
            mounts.append({"name": "gcs-credentials", "mountPath": directory, "readOnly": True})
            env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{directory}/{key}"})
    else:
        args = ["pull", str(source["reference"]), "--output", dest]
        secret = source.get("pullSecretRef")
        if secret:
            directory = f"{SECRETS_ROOT}/registry"
            volumes.append(
                {
                    "name": "registry-credentials",
                    "secret": {
                        "secretName": str(secret["name"]),
                        "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
                    },
                }
            )
            mounts.append(
                {"name": "registry-credentials", "mountPath": directory, "readOnly": True}
            )
            args += ["--registry-config", f"{directory}/config.json"]
        container.update(image=ORAS_IMAGE, args=args)
    if env:
        container["env"] = env
    container["volumeMounts"] = mounts
    container["resources"] = sizing.resources(sizing.DOWNLOAD)
    return container, volumes


def download_job(cache: ModelCache) -> dict:
    container, secret_volumes = _downloader(cache)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(cache),
            "namespace": cache.namespace,
            "labels": labels(cache),
        },
        "spec": {
            # No ttlSecondsAfterFinished: the finished Job is the record the cache's
            # status is read from (and a deleted one would be created again).
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "template": {
                "metadata": {"labels": labels(cache)},
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": {
                        "runAsUser": DOWNLOADER_UID,
                        "runAsNonRoot": True,
                        "fsGroup": DOWNLOADER_UID,
                    },
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "weights",
                            "persistentVolumeClaim": {"claimName": claim_name(cache.name)},
                        },
                        *secret_volumes,
                    ],
                },
            },
        },
    }


# The composed-resource keys of a cache's objects on one cluster.
def namespace_key(cluster: str) -> str:
    return resource_key("namespace", cluster)


def volume_key(cluster: str) -> str:
    return resource_key("volume", cluster)


def job_key(cache: ModelCache, cluster: str) -> str:
    return resource_key("download", cluster, cache.source_hash)


# The Job's own readiness on the member: it succeeded.
JOB_READY_CEL: Final = (
    "has(object.status) && has(object.status.succeeded) && object.status.succeeded > 0"
)


# --- What each cluster reports ------------------------------------------------------------


@dataclass(frozen=True)
class ClusterPhase:
    cluster: str
    phase: str
    reason: str
    message: str

    def to_status(self, cache: ModelCache) -> dict:
        return {
            "cluster": self.cluster,
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message,
            "claimName": claim_name(cache.name),
        }


def _remote(observed_object: dict | None) -> dict | None:
    if not observed_object:
        return None
    return ((observed_object.get("status") or {}).get("atProvider") or {}).get("manifest") or None


def _condition(obj: dict, kind: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def _count(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def observe_cluster(
    cluster: str, job_object: dict | None, volume_object: dict | None
) -> ClusterPhase:
    """One cluster's phase from its observed Job (and volume) Objects; a shape it cannot
    read is Pending with that said (a member's odd answer never fails the cache)."""
    try:
        return _observe_cluster(cluster, job_object, volume_object)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as err:
        return ClusterPhase(
            cluster,
            PHASE_PENDING,
            REASON_UNREADABLE,
            f"the download Job's status cannot be read ({type(err).__name__})",
        )


def _observe_cluster(
    cluster: str, job_object: dict | None, volume_object: dict | None
) -> ClusterPhase:
    job = _remote(job_object)
    if job is None:
        if job_object and condition_status(job_object, "Synced") == "False":
            why = next(
                (
                    c.get("message", "")
                    for c in (job_object.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Synced"
                ),
                "",
            )
            return ClusterPhase(
                cluster,
                PHASE_PENDING,
                REASON_NOT_APPLIED,
                f"the download Job cannot be applied: {why}"[:512],
            )
        return ClusterPhase(
            cluster,
            PHASE_PENDING,
            REASON_NOT_OBSERVED,
            "the download Job has not been observed yet",
        )
    done = _condition(job, "Complete")
    if done is not None:
        when = (job.get("status") or {}).get("completionTime") or done.get("lastTransitionTime")
        return ClusterPhase(
            cluster,
            PHASE_READY,
            REASON_COMPLETE,
            "the weights are complete" + (f" (downloaded by {when})" if when else ""),
        )
    failed = _condition(job, "Failed")
    if failed is not None:
        reason = str(failed.get("reason") or "Failed")
        message = str(failed.get("message") or "the download Job failed")
        return ClusterPhase(
            cluster,
            PHASE_FAILED,
            reason,
            f"{reason}: {message}"[:400]
            + f"; set the {contracts.ANNOTATION_RETRY} annotation to a new value to download again",
        )
    status = job.get("status") or {}
    # `active` counts pending pods too (one waiting for its volume is not downloading);
    # `ready` counts running ones (the downloader has no readiness probe).
    if _count(status.get("ready")):
        retries = _count(status.get("failed"))
        return ClusterPhase(
            cluster,
            PHASE_DOWNLOADING,
            REASON_RUNNING,
            "downloading"
            + (f" (attempt {retries + 1} of {DOWNLOAD_BACKOFF_LIMIT + 1})" if retries else ""),
        )
    volume = _remote(volume_object)
    volume_phase = ((volume or {}).get("status") or {}).get("phase")
    if volume_phase and volume_phase != "Bound":
        return ClusterPhase(
            cluster,
            PHASE_PENDING,
            REASON_WAITING_FOR_POD,
            f"the volume {((volume or {}).get('metadata') or {}).get('name', '')} is "
            f"{volume_phase}: the cluster needs a StorageClass offering ReadWriteMany",
        )
    started = "has not started running" if _count(status.get("active")) else "has not started"
    return ClusterPhase(
        cluster, PHASE_PENDING, REASON_WAITING_FOR_POD, f"the download Job's pod {started}"
    )


def staging_clusters(
    selected: list[Cluster], deployments: list[Deployment]
) -> tuple[list[Cluster], dict[str, str]]:
    """The selected clusters the cache is staged on (a deployment that references it
    could be placed there), and why each other one is not."""
    staged: list[Cluster] = []
    skipped: dict[str, str] = {}
    for cluster in selected:
        if any(placeable_pool(d, cluster) for d in deployments):
            staged.append(cluster)
        elif deployments:
            names = ", ".join(sorted(d.name for d in deployments))
            skipped[cluster.name] = (
                f"no ModelDeployment that references this cache ({names}) can be placed there"
            )
        else:
            skipped[cluster.name] = "no ModelDeployment references this cache"
    return staged, skipped


def cache_condition(phases: list[ClusterPhase], skipped: dict[str, str] | None = None) -> Condition:
    skipped = skipped or {}
    left_out = "; ".join(f"not staged on {c}: {why}" for c, why in sorted(skipped.items()))
    if not phases and skipped:
        return Condition(CACHE_READY, "False", REASON_NOT_PLACEABLE, left_out[:1024])
    if not phases:
        return Condition(
            CACHE_READY,
            "False",
            REASON_NO_CLUSTERS,
            "no InferenceCluster matches spec.clusterSelector",
        )
    ready = [p for p in phases if p.phase == PHASE_READY]
    if len(ready) == len(phases):
        message = f"the weights are complete on {len(ready)} clusters"
        return Condition(
            CACHE_READY,
            "True",
            PHASE_READY,
            (message + (f"; {left_out}" if left_out else ""))[:1024],
        )
    others = "; ".join(
        f"{p.cluster}: {p.phase} ({p.message})" for p in phases if p.phase != PHASE_READY
    )
    worst = next(
        (
            ph
            for ph in (PHASE_FAILED, PHASE_DOWNLOADING, PHASE_PENDING)
            if any(p.phase == ph for p in phases)
        ),
        PHASE_PENDING,
    )
    return Condition(
        CACHE_READY,
        "False",
        worst,
        (
            f"ready on {len(ready)} of {len(phases)} clusters; {others}"
            + (f"; {left_out}" if left_out else "")
        )[:1024],
    )


# --- What placement learns ------------------------------------------------------------------


@dataclass(frozen=True)
class CacheView:
    """A referenced cache as placement sees it: where it may exist, and where it is Ready."""

    name: str
    selector: LabelSelector
    phases: dict  # cluster name -> phase, as the cache's status last said
    exists: bool = True  # False: named by the deployment, absent from the API server
    size: str = ""  # spec.size: engines size their startup budget by it

    def allows(self, labels: dict) -> bool:
        """Whether the weights may exist on a cluster with these labels."""
        return self.exists and self.selector.matches(labels)

    @property
    def ready(self) -> frozenset[str]:
        return frozenset(c for c, p in self.phases.items() if p == PHASE_READY)

    def phase(self, cluster: str) -> str:
        return self.phases.get(cluster, PHASE_PENDING)


def read_cache_view(xr: dict) -> CacheView:
    """A referenced ModelCache (as the API server holds it) for placement."""
    cache = read_cache(xr)
    phases = {}
    status = xr.get("status")
    entries = status.get("clusters") if isinstance(status, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("cluster"):
            phases[str(entry["cluster"])] = str(entry.get("phase") or PHASE_PENDING)
    return CacheView(cache.name, cache.cluster_selector, phases, size=cache.size)


def absent_view(name: str) -> CacheView:
    """A cache the deployment names that the API server does not hold: it allows no
    cluster (nothing new is placed until it exists)."""
    return CacheView(name, LabelSelector(), {}, exists=False)


def ready_at(cache: CacheView | None, own: Iterable[Holding]) -> frozenset[str]:
    """The clusters whose engine pods may start: the cache is Ready there, or replicas
    already serve there (weights in GPU memory; a cache re-downloading under a serving
    model does not stop it)."""
    if cache is None:
        return frozenset()
    return cache.ready | {h.cluster for h in own if h.ready_replicas > 0}


def replica_mount(view: CacheView) -> dict:
    """What a ModelReplica carries so its pods mount the cache (the same on every cluster)."""
    return {
        "name": view.name,
        "claimName": claim_name(view.name),
        "mountPath": mount_path(view.name),
        **({"size": view.size} if view.size else {}),
    }
