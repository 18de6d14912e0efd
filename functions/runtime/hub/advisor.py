"""The experimental ranking model (and planner) behind an OpenAI-compatible Chat
Completions endpoint, asked through the official `openai` client.

Nothing here decides: the model's answer is advice the hub validates. A ranking is a
probability per candidate cluster; the hub reorders candidates within a tier only when
the top pick clears `confidenceThresholdPercent`, and only in `apply` mode (in `shadow`
it is recorded next to what the rules did). An answer that is not JSON, does not follow
the schema, names a cluster that is not a candidate, or comes after the timeout is an
error: the rules rank. After 3 consecutive failures the endpoint is skipped for a minute
(the runbook's "Model errors or timeouts").

Each call is timed into `plumb_model_request_duration_seconds{result=ok|error}` (or the
planner's histogram) through the `observe` callback the agent passes.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import jsonschema
import openai

from functions.runtime.hub.decision import Ranking
from functions.runtime.shared.policy import ChatEndpoint

FAILURES_BEFORE_SKIP: Final = 3
SKIP_SECONDS: Final = 60.0
RESULT_OK: Final = "ok"
RESULT_ERROR: Final = "error"

RANKING_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "probabilities": {
            "type": "object",
            "description": "Per candidate cluster, the probability it is the best helper.",
            "additionalProperties": {"type": "number", "minimum": 0, "maximum": 1},
        }
    },
    "required": ["probabilities"],
    "additionalProperties": False,
}

RANKING_PROMPT: Final = (
    "You rank the clusters that could lend replicas to a short cluster of an LLM serving "
    'fleet. Answer only with JSON: {"probabilities": {<candidate>: <0..1>}}, one entry '
    "per candidate and no other cluster, the probabilities summing to about 1."
)


class AdvisorError(Exception):
    """The endpoint failed, timed out, or answered outside the schema."""


@dataclass
class Breaker:
    """3 consecutive failures skip the endpoint for a minute; a success resets."""

    failures: int = 0
    skip_until: float = 0.0

    def allows(self, now: float) -> bool:
        return now >= self.skip_until

    def success(self) -> None:
        self.failures = 0

    def failure(self, now: float) -> None:
        self.failures += 1
        if self.failures >= FAILURES_BEFORE_SKIP:
            self.failures = 0
            self.skip_until = now + SKIP_SECONDS


class ChatAdvisor:
    """One endpoint: asks, checks the answer against a JSON schema, keeps the breaker."""

    def __init__(
        self,
        config: ChatEndpoint,
        api_key: str | None,
        observe: Callable[[float, str], None] = lambda seconds, result: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config
        self._client = openai.OpenAI(
            base_url=config.endpoint,
            # The client insists on a key; a server without one ignores it.
            api_key=api_key or "unused",
            timeout=config.timeout,
            max_retries=0,  # the breaker paces retries, not the client
        )
        self._observe = observe
        self._clock = clock
        self.breaker = Breaker()

    def ask(self, system: str, user: dict, name: str, schema: dict) -> dict:
        """The parsed answer, valid against `schema`; AdvisorError otherwise (also while
        the breaker skips the endpoint, without calling it)."""
        now = self._clock()
        if not self.breaker.allows(now):
            raise AdvisorError(
                f"skipped until {self.breaker.skip_until - now:.0f}s from now after"
                f" {FAILURES_BEFORE_SKIP} consecutive failures"
            )
        if self.config.response_format == "json_schema":
            response_format = {
                "type": "json_schema",
                # Not strict: a map keyed by cluster name is outside strict mode's subset.
                "json_schema": {"name": name, "schema": schema, "strict": False},
            }
        else:
            response_format = {"type": "json_object"}
        start = self._clock()
        try:
            completion = self._client.chat.completions.create(
                model=self.config.model,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": json.dumps(user, sort_keys=True)},
                ],
                response_format=response_format,
                temperature=0,
            )
            content = completion.choices[0].message.content if completion.choices else None
            if not content:
                raise AdvisorError("empty answer")
            try:
                answer = json.loads(content)
            except json.JSONDecodeError as err:
                raise AdvisorError(f"answer is not JSON: {err.msg}") from err
            try:
                jsonschema.validate(answer, schema)
            except jsonschema.ValidationError as err:
                raise AdvisorError(f"answer does not follow the schema: {err.message}") from err
        except openai.APITimeoutError as err:
            self._failed(start, now)
            raise AdvisorError(f"no answer within {self.config.timeout:g}s") from err
        except openai.APIStatusError as err:
            self._failed(start, now)
            raise AdvisorError(f"endpoint answered {err.status_code}") from err
        except openai.APIError as err:
            self._failed(start, now)
            raise AdvisorError(f"endpoint failed: {err.message}") from err
        except AdvisorError:
            self._failed(start, now)
            raise
        self.breaker.success()
        self._observe(self._clock() - start, RESULT_OK)
        return answer

    def _failed(self, start: float, now: float) -> None:
        self.breaker.failure(now)
        self._observe(self._clock() - start, RESULT_ERROR)

    def rank(self, candidates: tuple[str, ...], context: dict) -> Ranking:
        """Probabilities over exactly the candidates; an error instead of any other answer."""
        try:
            answer = self.ask(
                RANKING_PROMPT,
                {"candidates": list(candidates), **context},
                "ranking",
                RANKING_SCHEMA,
            )
        except AdvisorError as err:
            return Ranking({}, str(err))
        probabilities = {str(k): float(v) for k, v in answer["probabilities"].items()}
        unknown = sorted(set(probabilities) - set(candidates))
        if unknown:
            self.breaker.failure(self._clock())
            return Ranking({}, f"answer names clusters that are not candidates: {unknown}")
        return Ranking(dict(sorted(probabilities.items())))

    def propose(
        self, system: str, context: dict, schema: dict
    ) -> tuple[list[dict], str | None, float]:
        """The planner's plans (schema-valid, not yet checked against the limits), the
        error when there are none, and how long the call took."""
        start = self._clock()
        try:
            answer = self.ask(system, context, "plans", schema)
        except AdvisorError as err:
            return [], str(err), self._clock() - start
        return list(answer["plans"]), None, self._clock() - start
