"""`modelplane status | explain | retry | suggest | rollout`: the operator's side, reading
the control plane.

A shell around `fleet_status`: it lists the InferenceClusters, ModelDeployments and
ModelReplicas through a kubeconfig (the control plane, where Crossplane runs), hands the
plain objects to the pure summary, and prints it. It never talks to a member: everything
it says is already on the control plane, where the conditions come from.

The writes are annotations on a ModelDeployment, each a merge patch that the model's
function reads: `retry` (modelplane.ai/retry) and `rollout pause|resume|undo`
(modelplane.ai/rollout-paused, modelplane.ai/rollout-undo). Each prints what it changes
before writing, and refuses, saying why, when it would change nothing.

Installed as `modelplane` (the image's entrypoint dispatches these commands here) and as
`kubectl-modelplane`, so `kubectl modelplane status` works too.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any, Final

import click
import yaml

from functions.common.contracts import ANNOTATION_RETRY, API_GROUP, API_VERSION
from functions.common.naming import DNS_LABEL_RE, is_object_name
from functions.runtime.operator import adapters, fleet_status
from functions.runtime.operator import rollout as rollouts
from functions.runtime.operator import suggest as first_policy
from functions.runtime.operator.terminal import escape, escaped

COMMANDS: Final = ("status", "explain", "retry", "suggest", "rollout")

PLURAL_CLUSTERS: Final = "inferenceclusters"
PLURAL_DEPLOYMENTS: Final = "modeldeployments"
PLURAL_REPLICAS: Final = "modelreplicas"
PLURAL_ADAPTERS: Final = "modeladapters"


# Towards the API server: how long to wait for a connection and, once connected, for each
# answer. A failed connection or read is not retried: an unreachable or garbled API server
# is said once, on one line, within these bounds, rather than after silent attempts. A
# busy one's "retry after" answers (429/503 with Retry-After, from priority and fairness)
# are waited out a few times, as client-go does and as the client did before.
CONNECT_TIMEOUT_SECONDS: Final = 5.0
READ_TIMEOUT_SECONDS: Final = 30.0
RETRY_AFTER_ATTEMPTS: Final = 3
RETRY_AFTER_MAX_SECONDS: Final = 10
NOT_AN_API_SERVER: Final = (
    "answered with something that is not a Kubernetes API response; is this the control "
    "plane's API server?"
)


def _failure(message: str) -> click.ClickException:
    """An error on one line, its values escaped: a reason, a kubeconfig's or a server's
    words can carry anything."""
    return click.ClickException(escape(" ".join(message.split())))


def _no_answer(host: str, error: Exception) -> str:
    """Why a request got no API answer, in words (urllib3 wraps the cause in
    MaxRetryError)."""
    from urllib3 import exceptions  # noqa: PLC0415

    cause = getattr(error, "reason", None) or error
    unreachable = f"cannot reach the API server at {host}"
    # NewConnectionError is a ConnectTimeoutError to urllib3: ask it first.
    if isinstance(cause, exceptions.NewConnectionError):
        return f"{unreachable}: {str(cause).rpartition('new connection: ')[2]}"
    if isinstance(cause, exceptions.ConnectTimeoutError):
        return f"{unreachable}: no connection within {CONNECT_TIMEOUT_SECONDS:g}s"
    if isinstance(cause, exceptions.ReadTimeoutError):
        return (
            f"the API server at {host} took the connection but did not answer within "
            f"{READ_TIMEOUT_SECONDS:g}s"
        )
    if isinstance(cause, exceptions.SSLError):
        return f"no TLS connection to the API server at {host}: {cause}"
    if isinstance(cause, exceptions.ProtocolError):
        return f"{host} did not answer in HTTP; is this the control plane's API server? ({cause})"
    return f"{unreachable}: {cause}"


class ControlPlane:
    """The three kinds, read through one kubeconfig."""

    def __init__(self, api) -> None:
        from kubernetes import client  # noqa: PLC0415  (slow import; --help stays fast)

        self.objects = client.CustomObjectsApi(api)
        self.host = api.configuration.host
        self._client = client

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None, context: str | None) -> ControlPlane:
        from kubernetes import client, config  # noqa: PLC0415
        from urllib3.util.retry import Retry  # noqa: PLC0415

        settings = client.Configuration()
        settings.retries = Retry(
            total=RETRY_AFTER_ATTEMPTS,
            connect=0,
            read=0,
            other=0,
            status=RETRY_AFTER_ATTEMPTS,
            retry_after_max=RETRY_AFTER_MAX_SECONDS,
            raise_on_status=False,  # the last answer is the ApiException callers word
        )
        try:
            api = config.new_client_from_config(
                config_file=kubeconfig, context=context, client_configuration=settings
            )
        except config.ConfigException as error:
            raise _failure(f"cannot load the kubeconfig: {error}") from error
        return cls(api)

    def _call(self, what: str, method, *args) -> dict[str, Any]:
        """One request, bounded in time. An API server that cannot be reached, or does not
        answer like one, is a one-line error; its ApiException is the caller's to word."""
        from urllib3.exceptions import HTTPError  # noqa: PLC0415

        timeout = (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS)
        try:
            answer = method(*args, _request_timeout=timeout)
        except self._client.ApiException as error:
            if error.status == 0:  # the client refused the answer's content type
                raise _failure(
                    f"{what}: {self.host} {NOT_AN_API_SERVER} ({error.reason})"
                ) from None
            raise
        except (HTTPError, OSError) as error:
            raise _failure(f"{what}: {_no_answer(self.host, error)}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):  # said JSON, was not
            raise _failure(f"{what}: {self.host} {NOT_AN_API_SERVER}") from None
        if not isinstance(answer, dict):
            raise _failure(f"{what}: {self.host} {NOT_AN_API_SERVER}")
        return answer

    def _list(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        what = f"listing {plural}"
        try:
            if namespace and plural != PLURAL_CLUSTERS:
                found = self._call(
                    what,
                    self.objects.list_namespaced_custom_object,
                    API_GROUP,
                    API_VERSION,
                    namespace,
                    plural,
                )
            else:
                found = self._call(
                    what, self.objects.list_cluster_custom_object, API_GROUP, API_VERSION, plural
                )
        except self._client.ApiException as error:
            if error.status == 404:
                raise _failure(
                    f"{plural}.{API_GROUP} is not served by this API server: is this the "
                    f"control plane, with the modelplane Configuration installed?"
                ) from error
            raise _failure(f"{what}: {error.status} {error.reason}") from error
        items = found.get("items") or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise _failure(f"{what}: {self.host} {NOT_AN_API_SERVER}")
        return list(items)

    def clusters(self) -> list[dict[str, Any]]:
        return self._list(PLURAL_CLUSTERS, None)

    def fleet(self, namespace: str | None) -> fleet_status.FleetStatus:
        return fleet_status.summarize(
            self._list(PLURAL_CLUSTERS, None),
            self._list(PLURAL_DEPLOYMENTS, namespace),
            self._list(PLURAL_REPLICAS, namespace),
        )

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"reading {namespace}/{name}"
        try:
            return self._call(
                what,
                self.objects.get_namespaced_custom_object,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL_DEPLOYMENTS,
                name,
            )
        except self._client.ApiException as error:
            if error.status == 404:
                raise _failure(
                    f"no ModelDeployment {namespace}/{name} (list them with `modelplane status`)"
                ) from error
            raise _failure(f"{what}: {error.reason}") from error

    def replicas_of(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self._list(PLURAL_REPLICAS, namespace)
            if (r.get("spec") or {}).get("deployment") == name
        ]

    def adapters_of(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The ModelAdapters on a model; none where the kind is not installed."""
        try:
            return adapters.of_base(self._list(PLURAL_ADAPTERS, namespace), name)
        except click.ClickException as error:
            if "is not served by this API server" in error.message:
                return []
            raise

    def set_retry(self, namespace: str, name: str, value: str) -> None:
        self.annotate(namespace, name, {ANNOTATION_RETRY: value})

    def annotate(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None],
        resource_version: str | None = None,
    ) -> None:
        """A merge patch of the ModelDeployment's annotations (None removes one). With
        `resource_version`, only if the object has not changed since it was read: the
        API server refuses the patch (409) otherwise."""
        what = f"setting {', '.join(sorted(annotations))} on {namespace}/{name}"
        metadata: dict[str, Any] = {"annotations": annotations}
        if resource_version:
            metadata["resourceVersion"] = resource_version
        try:
            self._call(
                what,
                self.objects.patch_namespaced_custom_object,
                API_GROUP,
                API_VERSION,
                namespace,
                PLURAL_DEPLOYMENTS,
                name,
                {"metadata": metadata},
            )
        except self._client.ApiException as error:
            if error.status == 409 and resource_version:
                raise _failure(
                    f"{namespace}/{name} changed since it was read (its status or "
                    "annotations moved on); nothing was written: run the command again to "
                    "see the new preview"
                ) from error
            raise _failure(f"{what}: {error.status} {error.reason}") from error


def _namespace_of(kubeconfig: str | None, context: str | None) -> str:
    """The kubeconfig context's namespace, as kubectl picks it; `default` without one."""
    from kubernetes import config  # noqa: PLC0415

    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig)
        if context:
            contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
            current = next(c for c in contexts if c["name"] == context)
    except (config.ConfigException, StopIteration):
        return "default"
    return (current.get("context") or {}).get("namespace") or "default"


def model_reference(model: str, namespace: str | None) -> tuple[str | None, str]:
    """(namespace, name) of MODEL as the user gave it: `namespace/name` as `modelplane
    status` prints it, or a plain name with `-n/--namespace`. None as the namespace: the
    kubeconfig context's. A `-n` that names another namespace than MODEL's is refused
    rather than either one silently winning."""
    if "/" not in model:
        return namespace, model
    model_namespace, _, name = model.partition("/")
    if not model_namespace or not name or "/" in name:
        raise click.BadParameter(
            f"{model!r}: expected NAME or NAMESPACE/NAME (as `modelplane status` prints it)",
            param_hint="[NAMESPACE/]NAME",
        )
    if namespace is not None and namespace != model_namespace:
        raise click.UsageError(
            escape(
                f"{model} is in namespace {model_namespace!r} but -n/--namespace says "
                f"{namespace!r}; give the namespace once"
            )
        )
    return model_namespace, name


def checked_names(namespace: str, name: str) -> tuple[str, str]:
    """NAMESPACE and NAME as Kubernetes takes them (an RFC 1123 label and subdomain),
    refused before any request with the rule they break."""
    if len(namespace) > 63 or not DNS_LABEL_RE.fullmatch(namespace):
        raise click.BadParameter(
            escape(
                f"namespace {namespace!r} is not a Kubernetes namespace name: at most 63 "
                "lowercase letters, digits and '-', starting and ending with a letter or digit"
            ),
            param_hint="[NAMESPACE/]NAME",
        )
    if not is_object_name(name):
        raise click.BadParameter(
            escape(
                f"{name!r} is not a Kubernetes object name: at most 253 lowercase letters, "
                "digits, '-' and '.', starting and ending with a letter or digit"
            ),
            param_hint="[NAMESPACE/]NAME",
        )
    return namespace, name


def _model(ctx: click.Context, model: str, namespace: str | None) -> tuple[str, str]:
    namespace, name = model_reference(model, namespace)
    return checked_names(
        namespace or _namespace_of(ctx.obj["kubeconfig"], ctx.obj["context"]), name
    )


def _dump(document: dict[str, Any], output: str) -> str:
    if output == "json":
        return json.dumps(document, indent=2, sort_keys=False) + "\n"
    return yaml.safe_dump(document, sort_keys=False)


@click.group(help="Read the modelplane fleet from its control plane.")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    metavar="FILE",
    help="The control plane's kubeconfig (default: $KUBECONFIG).",
)
@click.option("--context", metavar="NAME", help="The kubeconfig context to use.")
@click.pass_context
def main(ctx: click.Context, kubeconfig: str | None, context: str | None) -> None:
    # KUBECONFIG may list several files; the client reads the first, as it documents.
    if kubeconfig and ":" in kubeconfig:
        kubeconfig = kubeconfig.split(":", 1)[0]
    ctx.obj = {"kubeconfig": kubeconfig, "context": context}


def _plane(ctx: click.Context) -> ControlPlane:
    return ControlPlane.from_kubeconfig(ctx.obj["kubeconfig"], ctx.obj["context"])


@main.command(help="The whole fleet in one answer: models, replicas, parked, unplaceable.")
@click.option("-n", "--namespace", help="Only models in this namespace (default: all).")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
)
@click.pass_context
def status(ctx: click.Context, namespace: str | None, output: str) -> None:
    fleet = _plane(ctx).fleet(namespace)
    if output == "table":
        click.echo(fleet_status.render_table(fleet), nl=False)
    else:
        click.echo(_dump(fleet.to_dict(), output), nl=False)


MODEL_ARGUMENT = click.argument("model", metavar="[NAMESPACE/]NAME")
NAMESPACE_OPTION = click.option(
    "-n",
    "--namespace",
    metavar="NAMESPACE",
    help="The model's namespace, for a plain NAME (default: the context's).",
)


@main.command(help="Why a model is short: its placements, unplaceable reason, parking, health.")
@MODEL_ARGUMENT
@NAMESPACE_OPTION
@click.pass_context
def explain(ctx: click.Context, model: str, namespace: str | None) -> None:
    namespace, model = _model(ctx, model, namespace)
    plane = _plane(ctx)
    deployment = plane.deployment(namespace, model)
    replicas = plane.replicas_of(namespace, model)
    text = fleet_status.explain(deployment, replicas, plane.clusters())
    lines = adapters.adapter_lines(escaped(plane.adapters_of(namespace, model)))
    click.echo(text + "".join(f"{line}\n" for line in lines), nl=False)


@main.command(help="Unpark a parked model (sets the modelplane.ai/retry annotation).")
@MODEL_ARGUMENT
@NAMESPACE_OPTION
@click.pass_context
def retry(ctx: click.Context, model: str, namespace: str | None) -> None:
    namespace, model = _model(ctx, model, namespace)
    plane = _plane(ctx)
    deployment = plane.deployment(namespace, model)
    summary = escaped(fleet_status.read_model(deployment, []))
    where = escape(f"{namespace}/{model}")
    if summary.parked is None:
        # Writing the annotation anyway would do nothing now and would be read as a retry
        # of whatever parks the model next; refusing keeps the annotation meaningful.
        click.echo(
            f"{where} is not parked ({summary.state}); nothing to retry. "
            + fleet_status.next_step(summary)
        )
        return
    value = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    plane.set_retry(namespace, model, value)
    click.echo(
        f"{where}: set {ANNOTATION_RETRY}={value}.\n"
        f"On its next reconcile the model is unparked and placed again; the "
        f"{summary.parked.failures} start failures that parked it no longer count. "
        f"If it keeps failing the same way it is parked again after the configured number "
        f"of new consecutive failures (5 by default); follow it with "
        f"`modelplane explain {where}`.\n"
        f"Last error: {summary.parked.last_error or 'none reported'}"
    )


@main.command(
    short_help="Print a first autoscaling policy (shadow mode) for a model.",
    help="Print a first autoscaling policy (shadow mode) for a model: every knob the "
    "operations checklist says to set per model, each with what goes wrong when it is off.",
)
@MODEL_ARGUMENT
@NAMESPACE_OPTION
@click.pass_context
def suggest(ctx: click.Context, model: str, namespace: str | None) -> None:
    namespace, model = _model(ctx, model, namespace)
    plane = _plane(ctx)
    deployment = plane.deployment(namespace, model)
    click.echo(first_policy.render(deployment, plane.clusters()), nl=False)


@main.group(
    short_help="Pause, resume or undo a model's rollout (prints which clusters change).",
    help="Steer a model's rollout: a change to its template reaching the clusters wave by "
    "wave. Each command prints which clusters change, then writes one annotation the "
    "model's function reads; it refuses, saying why, when there is nothing to do.",
)
def rollout() -> None:
    pass


DRY_RUN_OPTION = click.option(
    "--dry-run", is_flag=True, help="Print which clusters would change; write nothing."
)


def _steer(
    ctx: click.Context, action: str, model: str, namespace: str | None, dry_run: bool
) -> None:
    """Read the model and its ModelReplicas, print what `action` changes, and write its
    annotation only if the model is still as read (the preview is what is written)."""
    namespace, model = _model(ctx, model, namespace)
    plane = _plane(ctx)
    deployment = plane.deployment(namespace, model)
    current = rollouts.read_rollout(deployment, plane.replicas_of(namespace, model))
    steering = rollouts.plan(action, current)
    where = escape(f"{namespace}/{model}")
    if steering.patch is None:
        # Writing anyway would leave an annotation that means nothing now and something
        # else to the next rollout; refusing keeps it meaningful.
        raise _failure(f"{where} {escape(steering.refusal)}")
    click.echo(rollouts.preview(where, escaped(steering)), nl=False)
    if dry_run:
        click.echo("--dry-run: nothing written.")
        return
    annotations = steering.patch["metadata"]["annotations"]
    plane.annotate(
        namespace,
        model,
        annotations,
        resource_version=(deployment.get("metadata") or {}).get("resourceVersion"),
    )
    written = ", ".join(
        f"removed {key}" if value is None else f"set {key}={value}"
        for key, value in sorted(annotations.items())
    )
    click.echo(f"{escape(written)}. Follow it with `modelplane explain {where}`.")


@rollout.command(
    short_help="Hold a rollout at its current wave.",
    help="Hold a rollout at its current wave (sets modelplane.ai/rollout-paused).",
)
@MODEL_ARGUMENT
@NAMESPACE_OPTION
@DRY_RUN_OPTION
@click.pass_context
def pause(ctx: click.Context, model: str, namespace: str | None, dry_run: bool) -> None:
    _steer(ctx, rollouts.PAUSE, model, namespace, dry_run)


@rollout.command(
    short_help="Continue a paused rollout.",
    help="Continue a paused rollout (removes modelplane.ai/rollout-paused).",
)
@MODEL_ARGUMENT
@NAMESPACE_OPTION
@DRY_RUN_OPTION
@click.pass_context
def resume(ctx: click.Context, model: str, namespace: str | None, dry_run: bool) -> None:
    _steer(ctx, rollouts.RESUME, model, namespace, dry_run)


@rollout.command(
    short_help="Roll the revision in progress back to the last good one.",
    help="Roll the revision in progress back to the last good one on every cluster that "
    "has it (sets modelplane.ai/rollout-undo).",
)
@MODEL_ARGUMENT
@NAMESPACE_OPTION
@DRY_RUN_OPTION
@click.pass_context
def undo(ctx: click.Context, model: str, namespace: str | None, dry_run: bool) -> None:
    _steer(ctx, rollouts.UNDO, model, namespace, dry_run)


if __name__ == "__main__":
    sys.exit(main())
