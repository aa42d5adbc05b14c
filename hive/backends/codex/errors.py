"""Which Codex errors are the provider's failure (retry later, elsewhere) and not the work's."""

from __future__ import annotations

from typing import Any

# codexErrorInfo values that mean the provider failed (not the work), with the HTTP status they stand for.
PROVIDER_ERRORS: dict[str, int | None] = {
    "internalServerError": 500, "serverOverloaded": 503, "rateLimitExceeded": 429,
    "usageLimitExceeded": 429, "unauthorized": 401, "flexUnavailable": 503,
    "policyCapacityUnavailable": 503,
}
PROVIDER_ERROR_VARIANTS = ("httpConnectionFailed", "responseStreamConnectionFailed",
                           "responseStreamDisconnected", "responseTooManyFailedAttempts")


def classify_error(error: Any) -> tuple[bool, int | None]:
    """(is it the provider's failure, the HTTP status when known) for a Codex error object."""
    if not isinstance(error, dict):
        return False, None
    info = error.get("codexErrorInfo")
    if isinstance(info, str):
        if info in PROVIDER_ERRORS:
            return True, PROVIDER_ERRORS[info]
        if info == "other":
            text = str(error.get("message") or "").lower()
            if any(word in text for word in ("stream disconnected", "connection", "timed out", "timeout")):
                return True, None
        return False, None
    if isinstance(info, dict) and len(info) == 1:
        kind, detail = next(iter(info.items()))
        if kind in PROVIDER_ERROR_VARIANTS:
            status = detail.get("httpStatusCode") if isinstance(detail, dict) else None
            return True, status if isinstance(status, int) else None
    return False, None


def one_line(text: str) -> str:
    return " ".join(text.split())[:500]
