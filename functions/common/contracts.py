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

ANNOTATION_RETRY: Final = "modelplane.ai/retry"  # a new value unparks a parked model

# --- Ports ----------------------------------------------------------------------------

# The engine container's serving port; it also serves /metrics. Only engine containers
# use this name, so scraping by port name finds every engine and nothing else.
PORT_NAME_HTTP: Final = "http"
PORT_SERVING: Final = 8000
# In PrefillDecode the decode engine listens here, behind the routing sidecar on 8000.
PORT_DECODE_ENGINE: Final = 8001

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
HUB_LEASE_NAME: Final = "modelplane-hub"  # one per member; the fleet hub holds a majority
AGENT_LEASE_NAME: Final = "modelplane-agent"  # one agent replica per member takes part
SCALER_SERVICE_NAME: Final = "modelplane-scaler"
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
