"""The SQS transport's seam to boto3: botocore's exceptions leave a client call as babelq's.

:class:`GuardedClient` wraps a boto3 SQS client; every method called through it raises
babelq's classes, split by what the caller must do next:

* wait for the service (:class:`~babelq.errors.UnavailableError`): the endpoint refused or
  dropped the connection, a timeout, throttling, a server-side fault (HTTP 5xx);
* fix the configuration (:class:`~babelq.errors.ConfigurationError`): no or refused
  credentials, no region, a parameter botocore will not send;
* anything else SQS answered (:class:`~babelq.errors.SQSError`, ``code`` the error code): a
  refused request, counted as a failed attempt.

The client's error stays the ``__cause__``; the texts name the endpoint, never a secret.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from babelq.errors import BabelqError, ConfigurationError, SQSError, UnavailableError
from babelq.extras import optional_import
from babelq.urls import one_line, redact

#: error codes of a refused or missing credential (the request will never be accepted as is)
_CREDENTIALS: Final = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "AuthFailure",
        "ExpiredToken",
        "ExpiredTokenException",
        "IncompleteSignature",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSecurity",
        "MissingAuthenticationToken",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)
#: error codes of a service that is overloaded or failing (trying again later can succeed)
_BUSY: Final = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "RequestThrottled",
        "RequestTimeout",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
    }
)
_SERVER_FAULT: Final = 500


def translated(exc: BaseException, action: str, where: str) -> BabelqError | None:
    """babelq's error for a botocore error raised by ``action`` on ``where``; None if not one."""
    botocore = optional_import("botocore.exceptions", needed_for="url: the sqs transport")
    detail = one_line(exc, typed=True)
    if isinstance(exc, botocore.ConnectionError | botocore.HTTPClientError):
        return UnavailableError(f"sqs at {where} unavailable during {action}: {detail}")
    if isinstance(exc, botocore.NoCredentialsError | botocore.PartialCredentialsError):
        return ConfigurationError(
            f"aws_access_key_id: sqs {action} at {where} has no usable credentials: {detail}"
        )
    if isinstance(exc, botocore.NoRegionError):
        return ConfigurationError(f"region: sqs {action} at {where} needs a region: {detail}")
    if isinstance(exc, botocore.ParamValidationError):
        return ConfigurationError(f"sqs {action} at {where}: {detail}")
    if not isinstance(exc, botocore.ClientError):
        return None
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code in _CREDENTIALS:
        return ConfigurationError(
            f"aws_access_key_id: sqs at {where} refused {action}: {code}; check the credentials ({detail})"
        )
    if code in _BUSY or status >= _SERVER_FAULT:
        return UnavailableError(f"sqs at {where} unavailable during {action}: {detail}")
    return SQSError(f"sqs at {where} refused {action}: {detail}", code=code)


class GuardedClient:
    """A boto3 SQS client whose methods raise babelq's errors (see :func:`translated`).

    Attributes that are not methods (``exceptions``, ``meta``) pass through unchanged.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None)
        self.where = redact(endpoint) if isinstance(endpoint, str) and endpoint else "sqs"

    def __getattr__(self, name: str) -> Any:
        if name == "_client":  # not set yet (a copy being made): never look it up on itself
            raise AttributeError(name)
        value = getattr(self._client, name)
        if name.startswith("_") or not callable(value) or name in ("exceptions", "meta"):
            return value
        guarded = self._guarded(name, value)
        setattr(self, name, guarded)  # found on the instance from now on: wrapped once per method
        return guarded

    def _guarded(self, action: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except Exception as exc:
                mapped = translated(exc, action, self.where)
                if mapped is None:
                    raise
                raise mapped from exc

        return call

    def answered(self, exc: BaseException, error: str) -> bool:
        """Whether ``exc`` (raised through this client) is SQS's ``error`` (``QueueDoesNotExist``)."""
        kind = getattr(self._client.exceptions, error)
        return isinstance(exc, SQSError) and isinstance(exc.__cause__, kind)
