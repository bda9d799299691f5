"""rote.api.llm.complete and rote.api.llm.models: model calls through the anthropic SDK,
priced from the usage the API returned, with a usage event per call the API billed."""

from __future__ import annotations

import os
import time
import uuid

import anyio
import msgspec
import structlog
from anyio.abc import TaskStatus

from contracts import subjects
from contracts.base import Empty, utc_now
from contracts.llm import CompleteReply, CompleteRequest, ModelsReply, Usage, UsageEvent
from services import __version__
from services.kernel.codec import encode
from services.kernel.endpoints import Endpoint, start_service, stop_service
from services.kernel.errors import ServiceError
from services.kernel.logs import get_logger
from services.kernel.pricing import PriceTable, PriceTableError, load_price_table
from services.kernel.replies import Replies
from services.kernel.runtime import ServiceContext
from services.kernel.secrets import redact, register_credentials
from services.llm.calls import CallFailed, ModelCaller, make_client
from services.llm.messages import (
    RequestRefused,
    UnreadableReply,
    api_params,
    check_request,
    content_from_api,
    usage_from_api,
)

log = get_logger("rote.llm")

# Usage events of calls made outside any run go to rote.evt.llm.adhoc.usage.
ADHOC_RUN = "adhoc"
# Said with a model that is retired or retiring: where the alias is changed.
RETIRED_HINT = "point the alias at a current model in ROTE_PRICES_FILE"


class LlmService:
    """The endpoint handlers, separate from wiring so tests can build one directly."""

    def __init__(self, ctx: ServiceContext, caller: ModelCaller, prices: PriceTable) -> None:
        self.ctx = ctx
        self.caller = caller
        self.prices = prices
        self._unpriced_warned: set[str] = set()
        # A request sent again under its call_id (the runner re-sends one whose reply a
        # NATS reconnect may have lost) gets the first one's answer: no second model
        # call, no second usage event. The record is this process's: a re-send the
        # queue group hands to another llm process is a second call there, billed
        # twice (a usage event each; the caller's ledger counts the reply it got).
        # Re-sends follow reconnects only, so that is rare; a record shared in a KV
        # bucket would close it, at a KV write per call and a watch to wait on a call
        # in flight elsewhere: not worth it yet.
        self.replies: Replies[CompleteReply] = Replies(
            weigh=lambda outcome: (
                len(encode(outcome)) if isinstance(outcome, CompleteReply) else 1024
            ),
            remember=(ServiceError,),
        )

    async def models(self, _: Empty) -> ModelsReply:
        return self.prices.listing()

    async def complete(self, req: CompleteRequest) -> CompleteReply:
        with structlog.contextvars.bound_contextvars(run_id=req.run_id, task_id=req.task_id):
            return await self.replies.by_call_id(
                req.run_id,
                req.call_id,
                req,
                lambda: self._complete(req),
                on_repeat=lambda: log.info("llm_call_repeated", call_id=req.call_id),
            )

    async def _complete(self, req: CompleteRequest) -> CompleteReply:
        try:
            check_request(req)
        except RequestRefused as exc:
            raise ServiceError("invalid_request", str(exc), field=exc.field) from None
        model_id = self.prices.resolve(req.model)
        call_id = uuid.uuid4().hex
        started = time.perf_counter()
        try:
            params = api_params(req, model_id, accepts_effort=self.prices.accepts_effort(model_id))
            result = await self.caller.call(params)
        except CallFailed as exc:
            raise self._call_failed(exc, model_id) from None
        message = result.message
        # The API billed this call whatever its content: price it and publish its usage
        # before the content is judged, so a reply rote cannot carry still costs what
        # it cost.
        usage = usage_from_api(message.get("usage") or {}, cache_ttl=req.cache)
        cost_usd = self._price(model_id, str(message.get("model") or ""), usage)
        try:
            content = content_from_api(message.get("content") or [])
        except UnreadableReply as exc:
            await self._publish_usage(req, model_id, usage, cost_usd, result.attempts, call_id)
            raise self._unreadable(exc, model_id, result.attempts, usage, cost_usd) from None
        reply = CompleteReply(
            id=str(message.get("id") or call_id),
            model=str(message.get("model") or model_id),
            content=content,
            stop_reason=message.get("stop_reason"),
            usage=usage,
            cost_usd=cost_usd,
            attempts=result.attempts,
        )
        await self._publish_usage(req, model_id, usage, cost_usd, result.attempts, call_id)
        log.info(
            "llm_call",
            model=model_id,
            stop_reason=reply.stop_reason,
            attempts=result.attempts,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cost_usd=cost_usd,
            duration_ms=round((time.perf_counter() - started) * 1000),
            purpose=req.purpose,
        )
        return reply

    def _call_failed(self, exc: CallFailed, model_id: str) -> ServiceError:
        """The refusal of a call the API did not answer (after its retries), logged."""
        failure = exc.failure
        log.warning(
            "llm_call_failed",
            model=model_id,
            code=failure.code,
            status=failure.status,
            attempts=exc.attempts,
            error=redact(failure.message),
        )
        details: dict[str, object] = {"attempts": exc.attempts, "model": model_id}
        if failure.status is not None:
            details["status"] = failure.status
        if failure.request_id:
            details["request_id"] = failure.request_id
        message = failure.message
        retired = self.prices.retirement(model_id, utc_now().date())
        if failure.status == 404 and retired:
            # The API's own words ("model: claude-…") do not say why it is gone.
            message = f"{message} ({retired}: {RETIRED_HINT})"
        return ServiceError(failure.code, message, details=details)

    def _unreadable(
        self, exc: UnreadableReply, model_id: str, attempts: int, usage: Usage, cost_usd: float
    ) -> ServiceError:
        """The refusal of a billed reply whose content rote cannot carry, logged; it
        says what the call cost."""
        log.warning(
            "llm_reply_unreadable",
            model=model_id,
            attempts=attempts,
            cost_usd=cost_usd,
            error=str(exc),
        )
        return ServiceError(
            "upstream",
            str(exc),
            details={
                "attempts": attempts,
                "model": model_id,
                "cost_usd": cost_usd,
                "usage": msgspec.to_builtins(usage),
            },
        )

    def _price(self, model_id: str, answered_model: str, usage: Usage) -> float:
        """Cost from the price table: the model asked for, else the one that answered;
        an unpriced model costs 0 (and is reported once)."""
        priced = self.prices.cost(model_id, usage)
        if priced is None:
            priced = self.prices.cost(answered_model, usage)
        if priced is None and model_id not in self._unpriced_warned:
            self._unpriced_warned.add(model_id)
            log.warning("llm_model_unpriced", model=model_id, hint="add it to ROTE_PRICES_FILE")
        return priced or 0.0

    async def _publish_usage(
        self,
        req: CompleteRequest,
        model_id: str,
        usage: Usage,
        cost_usd: float,
        attempts: int,
        call_id: str,
    ) -> None:
        run = req.run_id or ADHOC_RUN
        event = UsageEvent(
            run_id=run,
            task_id=req.task_id,
            model=model_id,
            usage=usage,
            cost_usd=cost_usd,
            at=utc_now(),
            purpose=req.purpose,
            attempts=attempts,
            call_id=call_id,
        )
        try:
            await self.ctx.bus.publish_event(
                subjects.llm_event(run, "usage"), event, msg_id=f"llm-usage-{call_id}"
            )
        except Exception as exc:
            # The tokens are spent either way: answer the caller rather than make it
            # pay again, and leave the numbers in the log.
            log.error(
                "llm_usage_event_lost",
                error=redact(f"{type(exc).__name__}: {exc}"),
                call_id=call_id,
                cost_usd=cost_usd,
            )


async def serve(
    ctx: ServiceContext, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    # Before anything can log: every form of the API key the SDK will send is a secret.
    register_credentials(os.environ)
    try:
        prices = load_price_table(ctx.settings.prices_file)
    except PriceTableError as exc:
        log.error("llm_price_file_invalid", error=str(exc), hint="fix or unset ROTE_PRICES_FILE")
        raise
    caller = ModelCaller(
        make_client(),
        concurrency=ctx.settings.llm_concurrency,
        max_attempts=ctx.settings.llm_max_attempts,
    )
    for alias, notice in prices.aliases_retiring(utc_now().date()).items():
        log.warning("model_retiring", alias=alias, notice=notice, hint=RETIRED_HINT)
    llm = LlmService(ctx, caller, prices)
    service = await start_service(
        ctx.bus,
        name="rote-llm",
        version=__version__,
        description="Model calls (Anthropic Messages API) with pricing and usage events",
        endpoints=[
            Endpoint(
                "complete",
                subjects.LLM_COMPLETE,
                CompleteRequest,
                llm.complete,
                concurrent=True,
                description="one model call: messages in, content blocks, usage and cost out",
            ),
            Endpoint(
                "models", subjects.LLM_MODELS, Empty, llm.models, description="aliases and prices"
            ),
        ],
        task_group=ctx.task_group,
    )
    log.info(
        "llm_ready",
        base_url=redact(os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"),
        concurrency=ctx.settings.llm_concurrency,
        max_attempts=ctx.settings.llm_max_attempts,
    )
    task_status.started()
    try:
        await anyio.sleep_forever()
    finally:
        await stop_service(service)
        with anyio.CancelScope(shield=True):
            await caller.aclose()
