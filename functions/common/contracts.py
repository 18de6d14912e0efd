"""Names that more than one component relies on: API groups, labels, ports, Leases.

Renaming anything here is an API change: composed resources are matched, scraped and
elected by these exact strings on live clusters.
"""

from typing import Final

# --- API groups and kinds -------------------------------------------------------------

API_GROUP: Final = "modelplane.ai"
API_VERSION: Final = "v1alpha1"
API_GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"

KIND_INFERENCE_CLUSTER: Final = "InferenceCluster"
KIND_MODEL_DEPLOYMENT: Final = "ModelDeployment"
KIND_MODEL_REPLICA: Final = "ModelReplica"
KIND_METRIC_MAPPING: Final = "MetricMapping"
KIND_TELEMETRY_DESTINATION: Final = "TelemetryDestination"

AUTOSCALING_GROUP: Final = "autoscaling.modelplane.ai"
AUTOSCALING_GROUP_VERSION: Final = f"{AUTOSCALING_GROUP}/{API_VERSION}"
KIND_ADAPTIVE_POLICY: Final = "AdaptivePolicy"

# provider-kubernetes' namespaced Object, the envelope for everything sent to a member.
OBJECT_API_VERSION: Final = "kubernetes.m.crossplane.io/v1alpha1"
OBJECT_KIND: Final = "Object"

# --- Labels and annotations (the modelplane.ai/ prefix is reserved) -------------------

LABEL_PREFIX: Final = "modelplane.ai/"
LABEL_SERVING: Final = "modelplane.ai/serving"  # the ModelReplica a pod serves
LABEL_DEPLOYMENT: Final = "modelplane.ai/deployment"  # the ModelDeployment it belongs to
LABEL_ENGINE: Final = "modelplane.ai/engine"  # engines[].type: picks the MetricMapping
LABEL_ROLE: Final = "modelplane.ai/role"  # Standalone, Leader, Worker, Prefill, Decode
LABEL_CLUSTER: Final = "modelplane.ai/cluster"  # the InferenceCluster a ModelReplica runs on

POD_LABELS: Final = (LABEL_SERVING, LABEL_DEPLOYMENT, LABEL_ENGINE, LABEL_ROLE)
# The endpoint picker's own engine-type label (Gateway API Inference Extension's metrics
# extractor, `engineLabelKey` default; llm-d's scheduler reads it as its fallback): it
# picks which engine's queue and KV-cache metric names the picker reads. Stamped with
# the extension's name for the engines it maps; a pod without it is read as vLLM.
LABEL_PICKER_ENGINE_TYPE: Final = "inference.networking.k8s.io/engine-type"
PICKER_ENGINE_TYPES: Final = {"vllm": "vllm", "sglang": "sglang"}

ANNOTATION_RETRY: Final = "modelplane.ai/retry"  # a new value unparks a parked model
# Rollouts (compose-model-deployment's rollout.py; the operator CLI writes the annotations
# and reads status.rollout). Each composed ModelReplica carries its revision in
# spec.revision and in this label.
LABEL_REVISION: Final = "modelplane.ai/revision"
# Present with "true": the rollout holds where it stands; removed: it resumes.
ANNOTATION_ROLLOUT_PAUSED: Final = "modelplane.ai/rollout-paused"
# "<revision>": roll that in-progress revision back to the last good one.
ANNOTATION_ROLLOUT_UNDO: Final = "modelplane.ai/rollout-undo"
ROLLOUT_PHASE_PROGRESSING: Final = "Progressing"
ROLLOUT_PHASE_PAUSED: Final = "Paused"
ROLLOUT_PHASE_COMPLETE: Final = "Complete"
ROLLOUT_PHASE_ROLLED_BACK: Final = "RolledBack"
ROLLOUT_PHASES: Final = (
    ROLLOUT_PHASE_PROGRESSING,
    ROLLOUT_PHASE_PAUSED,
    ROLLOUT_PHASE_COMPLETE,
    ROLLOUT_PHASE_ROLLED_BACK,
)
# Set by a member's on-demand activator on a ModelDeployment (a new value each time) when a
# request found no ready replica: compose-model-deployment makes one fresh placement attempt
# for that value and answers it in status.onDemand.attempt.
ANNOTATION_ACTIVATE: Final = "modelplane.ai/activate"
# What compose-model-deployment writes in `status.onDemand.attempt.result` for a placed
# attempt, and the activation timeout when `spec.onDemand.activationTimeout` is unset;
# the member's activator reads both.
ON_DEMAND_RESULT_PLACED: Final = "Placed"
DEFAULT_ACTIVATION_TIMEOUT_SECONDS: Final = 300.0
# On every composed pod template: the definition (ModelReplica spec.definitionHash) the pod
# runs. The member's agent counts start failures per definition from it.
ANNOTATION_DEFINITION_HASH: Final = "modelplane.ai/definition-hash"
# On a collector's pod template (cluster, node and gateway tier): the hash of the config it
# mounts, so a new config rolls the pods instead of waiting for a restart.
ANNOTATION_CONFIG_HASH: Final = "modelplane.ai/config-hash"

# The contrib distribution carries every component the collector tiers and the gateway
# use; the tests run a collector built from the same release's modules (hack/tools/otelcol).
COLLECTOR_IMAGE: Final = "otel/opentelemetry-collector-contrib:0.161.0"
# Every collector tier's memory (cluster and node collectors, the gateway): the container's
# limit, memory_limiter's shares of it (it reads the cgroup limit: it refuses data while
# the Go heap's allocated bytes, garbage included, are above limit - spike = 60 %, and
# forces a collection at most every 10 s), and the Go runtime's settings under both.
COLLECTOR_MEMORY_LIMIT: Final = "1Gi"
COLLECTOR_MEMORY_LIMIT_PERCENTAGE: Final = 80
COLLECTOR_SPIKE_LIMIT_PERCENTAGE: Final = 20
# (name, value) in each collector container's env. GOGC=400 lets the heap grow to five
# times the live data between collections instead of twice: the cluster collector
# allocates per metric, point and statement, and collecting less often took ~5 % off its
# CPU per scraped sample (tests/bench/bench_collector.py, 50 and 200 pods) and ~7 % off
# the gateway's (bench_gateway.py). GOMEMLIMIT sits under memory_limiter's soft limit
# (614 MiB of 1Gi), so Go collects eagerly before garbage alone reaches it: with the soft
# limit below GOMEMLIMIT instead, a heap at five times its live data crossed it, and the
# limiter refused scrapes a collector at Go's default GOGC kept (a 200-pod bench scaled
# to a 300 MiB container). tests/unit test the order for every tier.
COLLECTOR_RUNTIME_ENV: Final = (("GOMEMLIMIT", "560MiB"), ("GOGC", "400"))


def memory_limiter() -> dict[str, object]:
    """The memory_limiter processor every collector tier runs first."""
    return {
        "check_interval": "1s",
        "limit_percentage": COLLECTOR_MEMORY_LIMIT_PERCENTAGE,
        "spike_limit_percentage": COLLECTOR_SPIKE_LIMIT_PERCENTAGE,
    }


# --- Ports ----------------------------------------------------------------------------

# The engine container's serving port; it also serves /metrics. Only engine containers
# use this name, so scraping by port name finds every engine and nothing else.
PORT_NAME_HTTP: Final = "http"
PORT_SERVING: Final = 8000
# In PrefillDecode the decode engine listens here, behind the routing sidecar on 8000.
PORT_DECODE_ENGINE: Final = 8001

# --- Multi-node launch contract -------------------------------------------------------

# Every pod of a multi-node replica (Leader and Workers, on every stack) carries these in
# the engine container's environment, with the same meaning whatever controller runs it:
# the engine flags compose-model-replica adds read them as $(NAME), and a command the user
# writes as `sh -c "..."` reads them as $NAME. Documented in docs/serving.md ("Multi-node
# launch contract"); renaming one breaks users' launch scripts.
ENV_LEADER_ADDRESS: Final = "MODELPLANE_LEADER_ADDRESS"  # the rank-0 pod's DNS name
ENV_NODE_RANK: Final = "MODELPLANE_NODE_RANK"  # this pod's rank: 0 is the Leader
ENV_NODE_COUNT: Final = "MODELPLANE_NODE_COUNT"  # nodes in the replica: workerNodes + 1
ENV_GROUP_SIZE: Final = "MODELPLANE_GROUP_SIZE"  # pods in the replica's group (one per node)
# The replica's group as its controller numbers it (LWS group index, Grove PodCliqueSet
# replica index): what the leader's address is built on.
ENV_GROUP_INDEX: Final = "MODELPLANE_GROUP_INDEX"
MULTINODE_ENV: Final = (
    ENV_GROUP_INDEX,
    ENV_LEADER_ADDRESS,
    ENV_NODE_RANK,
    ENV_NODE_COUNT,
    ENV_GROUP_SIZE,
)

# --- Serving roles and modes ------------------------------------------------------------

ROLE_STANDALONE: Final = "Standalone"
ROLE_LEADER: Final = "Leader"
ROLE_WORKER: Final = "Worker"
ROLE_PREFILL: Final = "Prefill"
ROLE_DECODE: Final = "Decode"
ROLES: Final = (ROLE_STANDALONE, ROLE_LEADER, ROLE_WORKER, ROLE_PREFILL, ROLE_DECODE)

SERVING_UNIFIED: Final = "Unified"
SERVING_PREFILL_DECODE: Final = "PrefillDecode"

STACK_STANDARD: Final = "Standard"
STACK_DYNAMO: Final = "Dynamo"

# --- Runtime ------------------------------------------------------------------------------

SYSTEM_NAMESPACE: Final = "modelplane-system"
# The cluster collector's Service (its Deployment has the same name) and the port of the
# page of merged vocabulary series the runtime agent computes its signals from.
COLLECTOR_SERVICE_NAME: Final = "modelplane-collector"
COLLECTOR_SIGNALS_PORT: Final = 9465
PORT_NAME_SIGNALS: Final = "signals"
# Where engines send OTLP traces and logs (with a TelemetryDestination that carries them):
# the cluster collector's OTLP receiver, gRPC and HTTP, behind the same Service.
COLLECTOR_OTLP_GRPC_PORT: Final = 4317
COLLECTOR_OTLP_HTTP_PORT: Final = 4318
PORT_NAME_OTLP_GRPC: Final = "otlp-grpc"
PORT_NAME_OTLP_HTTP: Final = "otlp-http"
COLLECTOR_OTLP_GRPC_HOST_PORT: Final = (
    f"{COLLECTOR_SERVICE_NAME}.{SYSTEM_NAMESPACE}.svc:{COLLECTOR_OTLP_GRPC_PORT}"
)
# Where the agent reads that page by default (in-cluster DNS; no store in between).
COLLECTOR_SIGNALS_URL: Final = (
    f"http://{COLLECTOR_SERVICE_NAME}.{SYSTEM_NAMESPACE}.svc:{COLLECTOR_SIGNALS_PORT}/metrics"
)
HUB_LEASE_NAME: Final = "modelplane-hub"  # one per member; the fleet hub holds a majority
AGENT_LEASE_NAME: Final = "modelplane-agent"  # one agent replica per member takes part
SCALER_SERVICE_NAME: Final = "modelplane-scaler"
# The agent's metrics Service (its Deployment has the same name): what a scrape targets.
AGENT_SERVICE_NAME: Final = "modelplane-agent"
METRICS_PORT: Final = 8080

# --- Function names (the Function packages and the Composition steps) -------------------

FUNCTION_SERVING_STACK: Final = "function-compose-serving-stack"
FUNCTION_MODEL_DEPLOYMENT: Final = "function-compose-model-deployment"
FUNCTION_MODEL_REPLICA: Final = "function-compose-model-replica"
FUNCTION_TELEMETRY: Final = "function-compose-telemetry"
FUNCTIONS: Final = (
    FUNCTION_SERVING_STACK,
    FUNCTION_MODEL_DEPLOYMENT,
    FUNCTION_MODEL_REPLICA,
    FUNCTION_TELEMETRY,
)

# The hub term (fencing token) of the Lease's holder, written on the hub Lease in the
# same compare-and-swap update as spec.holderIdentity; the scaler refuses any intent
# whose status.intent.fencingToken differs from its own member's copy.
ANNOTATION_FENCING_TOKEN: Final = "modelplane.ai/fencing-token"
SCALER_PORT: Final = 9090  # the scaler's gRPC port (KEDA's scalerAddress)
# The scaler's plaintext gRPC health port: kubelet's gRPC probe speaks no TLS, and the
# scaler port may require client certificates, so health has a server of its own.
SCALER_HEALTH_PORT: Final = 9091
# gRPC health service names the scaler answers: "" (ready: its cache is filled) and
# this one (live: the process serves).
SCALER_LIVENESS_SERVICE: Final = "liveness"
# Client-certificate authentication between KEDA and the scaler, on every member.
# The scaler serves TLS from SCALER_TLS_SECRET (in SYSTEM_NAMESPACE: tls.crt, tls.key for
# the scaler Service's DNS name, and ca.crt, the CA KEDA's client certificate is signed
# by). KEDA presents the certificate in SCALER_CLIENT_SECRET (in KEDA_NAMESPACE, KEDA's
# namespace for cluster-scoped auth objects: ca.crt, the CA that signed the scaler's
# certificate; tls.crt; tls.key) through the ClusterTriggerAuthentication
# SCALER_TRIGGER_AUTHENTICATION every composed ScaledObject's trigger names. The platform
# team provides both per member on the control plane, in the composed namespace, as
# SCALER_TLS_SECRET + "-" + member and SCALER_CLIENT_SECRET + "-" + member; they are
# copied to the member, never read by a function.
SCALER_TLS_SECRET: Final = "modelplane-scaler-tls"
SCALER_CLIENT_SECRET: Final = "modelplane-scaler-client"
SCALER_TRIGGER_AUTHENTICATION: Final = "modelplane-scaler"
KEDA_NAMESPACE: Final = "keda"
# The agent's probes, served beside /metrics on METRICS_PORT.
HEALTHZ_PATH: Final = "/healthz"
READYZ_PATH: Final = "/readyz"

# --- Telemetry resource attributes --------------------------------------------------------

# The resource attributes every cluster-tier collector puts on what it exports: the pod
# labels above lifted by k8sattributes (the cluster is RESOURCE_ATTRIBUTE_CLUSTER below).
# The fleet gateway rolls up and the runtime queries by these exact keys.
RESOURCE_ATTR_ENGINE: Final = "modelplane.engine"  # from LABEL_ENGINE
RESOURCE_ATTR_DEPLOYMENT: Final = "modelplane.deployment"  # from LABEL_DEPLOYMENT
RESOURCE_ATTR_SERVING: Final = "modelplane.serving"  # from LABEL_SERVING
RESOURCE_ATTR_NAMESPACE: Final = "k8s.namespace.name"
# A composed pod's metrics-only port (the endpoint picker's), scraped with the
# collector's service-account token; engines serve /metrics on PORT_NAME_HTTP instead.
PORT_NAME_METRICS: Final = "metrics"

# --- Fleet telemetry (compose-telemetry's gateway <-> compose-serving-stack's collectors) --

# The Secret that carries the fleet's bearer token: compose-telemetry propagates it (from
# TelemetryDestination.spec.gateway.tokenSecretRef) to the gateway, and every cluster's
# collector mounts the same-named Secret in its namespace to authenticate its OTLP push.
TELEMETRY_TOKEN_SECRET_NAME: Final = "modelplane-telemetry-token"
TELEMETRY_TOKEN_SECRET_KEY: Final = "token"
# The resource attribute every cluster-tier collector sets to its InferenceCluster's name;
# the gateway rolls the fleet up by dropping it (and every other per-source attribute).
RESOURCE_ATTRIBUTE_CLUSTER: Final = "modelplane.cluster"
# Fleet roll-up series carry this resource attribute with the value "fleet" (as the label
# modelplane_scope in Prometheus); per-cluster series never do.
RESOURCE_ATTRIBUTE_SCOPE: Final = "modelplane.scope"
FLEET_SCOPE: Final = "fleet"
# Each gateway replica stamps its fleet series with its pod name (replicas roll up apart).
RESOURCE_ATTRIBUTE_GATEWAY: Final = "modelplane.gateway"
# Those attributes as Prometheus labels: the roll-up owns them, so no MetricMapping may
# rename an engine label onto one (its series would be summed into the wrong total).
ROLLUP_LABELS: Final = frozenset(
    a.replace(".", "_")
    for a in (RESOURCE_ATTRIBUTE_CLUSTER, RESOURCE_ATTRIBUTE_SCOPE, RESOURCE_ATTRIBUTE_GATEWAY)
)
# The engine type on every series of the cluster collector's shared engines job while
# the receiver relabels it (a target label, so the job's metric_relabel_configs can apply
# each MetricMapping's label renames to its own engine's series); the rules drop it again,
# so no MetricMapping may name it either.
SCRAPE_ENGINE_LABEL: Final = "modelplane_scrape_engine"
# The gateway's OTLP ports (gRPC is what clusters push to; HTTP is also served).
GATEWAY_OTLP_GRPC_PORT: Final = 4317
GATEWAY_OTLP_HTTP_PORT: Final = 4318

# The inference Gateway every member runs (compose-serving-stack's); each model's
# HTTPRoute attaches to it, so its listeners must allow routes from all namespaces.
INFERENCE_GATEWAY_NAME: Final = "modelplane-inference"
INFERENCE_GATEWAY_NAMESPACE: Final = SYSTEM_NAMESPACE
# Requests name their model in this header (set by the Gateway API Inference
# Extension's body-based router from the OpenAI request's `model`): the deployment name.
HEADER_MODEL_NAME: Final = "X-Gateway-Model-Name"

# The InferencePool (Gateway API Inference Extension) a member's route sends its own
# share to: a pool selects pods in its own cluster only, so on a member's route an
# InferencePool backendRef is always that member's pods.
INFERENCE_POOL_GROUP: Final = "inference.networking.k8s.io"
# Envoy Gateway's HTTPRouteFilter (a route's direct response: why a model is unavailable).
ENVOY_GATEWAY_GROUP: Final = "gateway.envoyproxy.io"
KIND_INFERENCE_POOL: Final = "InferencePool"
# Managed traffic reaches another member through the Multi-Cluster Services API
# (KEP-1645): each member exports a per-cluster Service of its serving pods
# (ServiceExport), and the ClusterSet's MCS controller imports it into every member as
# a ServiceImport of the same name, which Gateway API accepts as a backendRef (GEP-1748).
MULTICLUSTER_GROUP: Final = "multicluster.x-k8s.io"
MULTICLUSTER_VERSION: Final = "v1alpha1"
KIND_SERVICE_EXPORT: Final = "ServiceExport"
KIND_SERVICE_IMPORT: Final = "ServiceImport"


# --- On-demand models ---------------------------------------------------------------------

# The activator every member runs: an on-demand model's route points at it while the model
# has no ready replica on that member. The route names the ModelDeployment in
# HEADER_DEPLOYMENT (`namespace/name`); the activator proxies on with HEADER_ACTIVATED set,
# and answers (never proxies) a request that already carries it, so no loop can form.
ACTIVATOR_SERVICE_NAME: Final = "modelplane-activator"
ACTIVATOR_PORT: Final = 8090
# The kubelet's probes only: the NetworkPolicy leaves this port open and ACTIVATOR_PORT to
# the gateway's proxies alone.
ACTIVATOR_HEALTH_PORT: Final = 8091
HEADER_DEPLOYMENT: Final = "X-Modelplane-Deployment"
# Set by the same route filter: a value derived from the ModelReplica's uid (route_token),
# which only those who may read the model's namespace can learn. The activator serves an
# identity only with the token its route sets, so a client that reaches the activator
# directly (no NetworkPolicy enforcement) cannot claim another namespace's model.
HEADER_ROUTE_TOKEN: Final = "X-Modelplane-Route-Token"
HEADER_ACTIVATED: Final = "X-Modelplane-Activated"
# The control plane's Secret (in the composed namespace, key `kubeconfig`) with the
# activator's credentials for one member: a ServiceAccount bound to ACTIVATOR_CLUSTER_ROLE
# (get ModelDeployments and patch them to set ANNOTATION_ACTIVATE; no list or watch: the
# rules are functions/runtime/activator/server.py's CONTROL_PLANE_RULES), copied to the
# member as ACTIVATOR_SERVICE_NAME + "-control-plane".
ACTIVATOR_SECRET_PREFIX: Final = "modelplane-activator-"
ACTIVATOR_SECRET_KEY: Final = "kubeconfig"
ACTIVATOR_CLUSTER_ROLE: Final = "modelplane-activator"

# AdaptivePolicy.spec.workload names the model's KEDA ScaledObject (named after the
# deployment), not the Deployment / LeaderWorkerSet / PodCliqueSet behind it: the copy
# must be byte-identical on every member, and members on different stacks run different
# workload kinds. The agent follows the ScaledObject's spec.scaleTargetRef to the pods.
SCALED_OBJECT_API_VERSION: Final = "keda.sh/v1alpha1"
KIND_SCALED_OBJECT: Final = "ScaledObject"

# AdaptivePolicy.spec.clusters maxItems (apis/adaptivepolicies/definition.yaml): every
# ModelReplica of an autoscaled deployment carries the full member list, so such a
# deployment is placed on at most this many clusters.
ADAPTIVE_POLICY_MAX_CLUSTERS: Final = 100

# --- KAI scheduler (Dynamo stack) --------------------------------------------------------

# compose-serving-stack creates the queues; compose-model-replica labels every Grove pod
# into the leaf queue. Other tenants' queues on a shared cluster are not ours.
KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"
KAI_ROOT_QUEUE: Final = "modelplane-root"
KAI_QUEUE: Final = "modelplane"

# --- ModelCache (compose-model-deployment composes it; compose-model-replica mounts it) ---

KIND_MODEL_CACHE: Final = "ModelCache"
LABEL_MODEL_CACHE: Final = "modelplane.ai/model-cache"  # on a cache's volume and Job
