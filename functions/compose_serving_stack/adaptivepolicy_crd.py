"""The AdaptivePolicy CRD that compose-serving-stack installs in every member.

apis/adaptivepolicies/definition.yaml is the source; the function image carries only the
`functions` package, so the CRD travels as this copy. tests/unit/test_runtime_hosting.py
fails if the two differ, and rewrites this file with UPDATE_GOLDEN=1.
"""

# ruff: noqa: E501  (a verbatim copy of a YAML file)
from typing import Final

import yaml

CRD_YAML: Final = r"""
# AdaptivePolicy: a plain CRD (not an XRD) that compose-serving-stack installs in every
# member. compose-model-replica writes one byte-identical copy per member a deployment
# uses; the member's agent writes status.report, the hub writes status.intent/fleet, and
# the scaler reads status.intent.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: adaptivepolicies.autoscaling.modelplane.ai
spec:
  group: autoscaling.modelplane.ai
  names:
    kind: AdaptivePolicy
    listKind: AdaptivePolicyList
    plural: adaptivepolicies
    singular: adaptivepolicy
    categories: [modelplane]
  scope: Namespaced
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources:
        status: {}
      additionalPrinterColumns:
        - name: MODE
          type: string
          jsonPath: .spec.mode
        - name: NEEDED
          type: integer
          jsonPath: .status.report.needed
        - name: FLOOR
          type: integer
          jsonPath: .status.intent.floor
        - name: PHASE
          type: string
          jsonPath: .status.fleet.phase
        - name: AGE
          type: date
          jsonPath: .metadata.creationTimestamp
      schema:
        openAPIV3Schema:
          type: object
          description: >-
            One model's fleet autoscaling policy, identical in every member that runs
            it. The hub raises replica floors and shifts traffic between members; each
            member's scaler serves its floor to KEDA.
          required: [spec]
          properties:
            apiVersion:
              type: string
              description: APIVersion of this object.
            kind:
              type: string
              description: Kind of this object.
            metadata:
              type: object
            spec:
              type: object
              description: The policy.
              required: [workload, clusters]
              properties:
                mode:
                  type: string
                  description: >-
                    shadow decides and logs without acting; auto acts; off stops the hub
                    for this policy. Setting shadow stops scalers serving floors at once.
                  enum: ["off", shadow, auto]
                  default: shadow
                workload:
                  type: object
                  description: The engine workload the floors apply to, in this namespace.
                  required: [apiVersion, kind, name]
                  properties:
                    apiVersion:
                      type: string
                      description: API version of the workload.
                      maxLength: 253
                    kind:
                      type: string
                      description: Kind of the workload.
                      maxLength: 63
                    name:
                      type: string
                      description: Name of the workload.
                      maxLength: 253
                clusters:
                  type: array
                  description: The members, with where replicas may run and how many.
                  minItems: 1
                  maxItems: 100
                  x-kubernetes-validations:
                    - rule: self.all(c, self.exists_one(d, d.name == c.name))
                      message: clusters[].name must be unique
                  items:
                    type: object
                    required: [name, maxReplicas]
                    properties:
                      name:
                        type: string
                        description: The member (InferenceCluster name).
                        maxLength: 253
                      region:
                        type: string
                        description: The member's region, when its nodes do not carry one.
                        maxLength: 63
                      maxReplicas:
                        type: integer
                        description: The ceiling on any floor the hub raises here.
                        minimum: 0
                        maximum: 1000
                      nodePools:
                        type: array
                        description: Registered NodePools; only their nodes count as room.
                        maxItems: 32
                        items:
                          type: string
                          maxLength: 253
                      nodeSelector:
                        type: object
                        description: Unmanaged nodes matching these labels also count as room.
                        additionalProperties:
                          type: string
                      backendRef:
                        type: string
                        description: >-
                          The route backendRef (by name) that sends traffic to this member;
                          the member's name when unset.
                        maxLength: 253
                route:
                  type: object
                  description: The HTTPRoute whose backendRefs weights the hub sets.
                  properties:
                    name:
                      type: string
                      description: Name of the route.
                      maxLength: 253
                    namespace:
                      type: string
                      description: Namespace of the route.
                      maxLength: 63
                signals:
                  type: object
                  description: PromQL queries, each returning exactly one sample.
                  properties:
                    demand:
                      type: string
                      description: The load.
                      maxLength: 2048
                    pressure:
                      type: string
                      description: Load per ready replica.
                      maxLength: 2048
                    latency:
                      type: string
                      description: Latency in seconds.
                      maxLength: 2048
                    errorRate:
                      type: string
                      description: Error ratio 0-1.
                      maxLength: 2048
                capacity:
                  type: object
                  description: What one replica serves.
                  properties:
                    replicaCapacity:
                      type: number
                      description: Demand one replica serves.
                      exclusiveMinimum: true
                      minimum: 0
                latencySLO:
                  type: number
                  description: Seconds; a member over it never gains traffic.
                  exclusiveMinimum: true
                  minimum: 0
                errorRateSLO:
                  type: number
                  description: Ratio 0-1; a member over it never gains traffic.
                  minimum: 0
                  maximum: 1
                escalation:
                  type: object
                  description: Timings of borrowing and returning capacity.
                  properties:
                    step:
                      type: integer
                      description: Most replicas added to one member per cooldown.
                      minimum: 1
                      default: 2
                    after:
                      type: string
                      description: Shortage duration before other members help.
                      default: 2m
                      pattern: '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$'
                    earlyAfter:
                      type: string
                      description: Shortage duration before escalating when home's NodePools cannot help.
                      default: 30s
                      pattern: '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$'
                    readyTimeout:
                      type: string
                      description: How long added replicas may take to become ready.
                      default: 10m
                      pattern: '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$'
                    calmFor:
                      type: string
                      description: Calm before capacity and traffic are returned, one step each.
                      default: 10m
                      pattern: '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$'
                    cooldown:
                      type: string
                      description: Pause between two steps for one member.
                      default: 1m
                      pattern: '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$'
                traffic:
                  type: object
                  description: Traffic shifting.
                  properties:
                    stepPercent:
                      type: integer
                      description: Most traffic moved per step, in percent.
                      minimum: 1
                      maximum: 100
                      default: 10
            status:
              type: object
              description: Written by the member's agent (report) and the hub (intent, fleet).
              properties:
                report:
                  type: object
                  description: This member's last report (every 30 s).
                  properties:
                    time:
                      type: string
                      format: date-time
                      description: When the report was made.
                    specHash:
                      type: string
                      description: Hash of the fields the report is computed from.
                    ready:
                      type: integer
                      description: Ready replicas here.
                    desired:
                      type: integer
                      description: Replicas the workload asks for here.
                    scheduled:
                      type: integer
                      description: Replicas on a node here (ready or still loading).
                    needed:
                      type: integer
                      description: Replicas needed beyond what runs.
                    staticRoom:
                      type: integer
                      description: Replicas that still fit on registered existing nodes.
                    nodePoolHeadroom:
                      type: integer
                      description: Replicas the registered NodePools can still add.
                    safePressure:
                      type: number
                      description: Pressure a replica has been seen to serve safely.
                    demand:
                      type: number
                      description: The demand signal's value.
                    pressure:
                      type: number
                      description: The pressure signal's value.
                    latency:
                      type: number
                      description: The latency signal's value.
                    errorRate:
                      type: number
                      description: The error-rate signal's value.
                    region:
                      type: string
                      description: clusters[].region, else the one region its nodes are labelled with.
                intent:
                  type: object
                  description: The hub's instruction to this member; the scaler serves it.
                  properties:
                    floor:
                      type: integer
                      description: Replicas the scaler asks KEDA for at least.
                    tier:
                      type: integer
                      description: Order of release (highest first); -1 raises home.
                    hub:
                      type: string
                      description: The hub that wrote the intent (<cluster>/<pod>).
                    fencingToken:
                      type: string
                      description: The hub term; the scaler refuses intents from any other.
                    expires:
                      type: string
                      format: date-time
                      description: After this the scaler serves 0.
                fleet:
                  type: object
                  description: The hub's view of the fleet (hub's copy; simulated in shadow mode).
                  properties:
                    phase:
                      type: string
                      description: Steady, Escalated or Recovering.
                      enum: [Steady, Escalated, Recovering]
                    hub:
                      type: string
                      description: The current hub.
                    outOfSync:
                      type: array
                      description: Members whose copy of the policy differs.
                      items:
                        type: string
                    held:
                      type: array
                      description: Members whose floor is due for release but kept (no usable report).
                      items:
                        type: string
                    calmSince:
                      type: string
                      format: date-time
                      description: Since when no member has been short.
                    lastTrafficAt:
                      type: string
                      format: date-time
                      description: The last traffic step.
                    lastReturnAt:
                      type: string
                      format: date-time
                      description: The last step returning traffic home.
                    time:
                      type: string
                      format: date-time
                      description: The hub step that wrote this; a new hub continues from the freshest copy.
                    clusters:
                      type: array
                      description: Per-member floor and weight.
                      items:
                        type: object
                        properties:
                          name:
                            type: string
                            description: The member.
                          floor:
                            type: integer
                            description: Its floor.
                          weight:
                            type: integer
                            description: Its traffic weight.
                          static:
                            type: boolean
                            description: Whether the floor uses static room.
                          tier:
                            type: integer
                            description: Release order (highest first); -1 is home's own floor.
                          base:
                            type: integer
                            description: Replicas the member ran before the hub first raised its floor.
                          raisedFrom:
                            type: integer
                            description: The floor before its last raise (what a take-back returns to).
                          raisedAt:
                            type: string
                            format: date-time
                            description: The last raise, until that many replicas are ready.
                          notReadyWarned:
                            type: boolean
                            description: ReplicasNotReady was raised for the last raise.
                          lastStepAt:
                            type: string
                            format: date-time
                            description: The last floor change here (cooldown).
                          shortSince:
                            type: string
                            format: date-time
                            description: Since when the member has been short.
                          steadyWeight:
                            type: integer
                            description: Its weight when the fleet left Steady (where traffic returns to).
                          skippedUntil:
                            type: string
                            format: date-time
                            description: Skipped as a helper until then.
                conditions:
                  type: array
                  description: Ready (Observed, ObservationFailed, NotAMember) and the hub's.
                  items:
                    type: object
                    required: [type, status]
                    properties:
                      type:
                        type: string
                        description: Type of the condition.
                      status:
                        type: string
                        description: True, False or Unknown.
                      reason:
                        type: string
                        description: Machine-readable reason.
                      message:
                        type: string
                        description: What a person should know.
                      lastTransitionTime:
                        type: string
                        format: date-time
                        description: When the status last changed.
                      observedGeneration:
                        type: integer
                        description: The generation the condition is about.
"""


def crd() -> dict:
    return yaml.safe_load(CRD_YAML)
