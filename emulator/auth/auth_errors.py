"""Every authentication/authorization error, its code, status and message, in one place.

AWS answers the same failure with different codes depending on the service's protocol family:
JSON services (sagemaker-runtime's rest-json, SageMaker's and Application Auto Scaling's JSON 1.1,
CloudWatch's JSON 1.0 and smithy RPC v2 CBOR) use ``...Exception`` codes; query services
(CloudWatch's ``Action=...`` form) use the older codes. Sources, and [U] where unconfirmed:

- unsigned: ``MissingAuthenticationTokenException`` 403 "Missing Authentication Token" — observed
  from runtime.sagemaker (aws/amazon-sagemaker-examples#290 shows the raw response). Query form:
  ``MissingAuthenticationToken`` 403 (AWS "Common Errors" pages) with [U] message.
- unknown access key: ``UnrecognizedClientException`` "The security token included in the request
  is invalid." — observed from SageMaker's API with status 400
  (aws/amazon-sagemaker-operator-for-k8s#99). For rest-json the status is [U] 403 (observed from
  Lambda, also rest-json: iann0036/iamlive#58). Query form: ``InvalidClientTokenId`` 403 (Common
  Errors pages).
- bad signature: ``InvalidSignatureException`` "The request signature we calculated does not match
  the signature you provided. ..." (IAM "Troubleshoot signed requests"); status [U] 403 for
  rest-json (observed 403 for EKS, rest-json), [U] 400 for JSON 1.x. Query form:
  ``SignatureDoesNotMatch`` 403.
- clock skew: "Signature expired: <x-amz-date> is now earlier than <now-5m> (<now> - 5 min.)" with
  the bad-signature code (observed text and 403; IAM troubleshooting page names both messages).
- malformed Authorization header: ``IncompleteSignatureException`` [U] (JSON) /
  ``IncompleteSignature`` (query), 400 per the Common Errors pages.
- access denied: ``AccessDeniedException``, 400 for JSON services (Common Errors pages of JSON
  services, e.g. Personalize, Lex), "User: <arn> is not authorized to perform: <action> on resource:
  <arn> because no identity-based policy allows the <action> action" — observed from
  sagemaker-runtime (philschmid/cdk-samples#2); "... with an explicit deny in an identity-based
  policy" (IAM "Troubleshoot access denied error messages"). Query form: ``AccessDenied`` 403 [U].
  For actions on ``*`` the "on resource: ..." part is left out [U].
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from emulator.contract.apis import Protocol  # re-exported: errors render per protocol
from emulator.contract.protocol_errors import Rendered, render_error


class Failure(str, Enum):
    UNSIGNED = "unsigned"
    UNKNOWN_KEY = "unknown-key"
    BAD_SIGNATURE = "bad-signature"
    INCOMPLETE = "incomplete"
    DENIED = "denied"
    REPEATED_PARAMETER = "repeated-parameter"


# (json code, json status, rest-json status, query code, query status)
_TABLE: dict[Failure, tuple[str, int, int, str, int]] = {
    Failure.UNSIGNED: ("MissingAuthenticationTokenException", 403, 403,
                       "MissingAuthenticationToken", 403),
    Failure.UNKNOWN_KEY: ("UnrecognizedClientException", 400, 403, "InvalidClientTokenId", 403),
    Failure.BAD_SIGNATURE: ("InvalidSignatureException", 400, 403, "SignatureDoesNotMatch", 403),
    Failure.INCOMPLETE: ("IncompleteSignatureException", 400, 400, "IncompleteSignature", 400),
    Failure.DENIED: ("AccessDeniedException", 400, 400, "AccessDenied", 403),
    # Only the query protocol can repeat a parameter; CloudWatch's own code for a request whose
    # parameters contradict each other [U] (what AWS answers to a repeat is unconfirmed).
    Failure.REPEATED_PARAMETER: ("InvalidParameterCombinationException", 400, 400,
                                 "InvalidParameterCombination", 400),
}


@dataclass
class AuthError(Exception):
    failure: Failure
    message: str

    def __str__(self) -> str:
        return f"{self.failure.value}: {self.message}"

    def code(self, protocol: Protocol) -> str:
        json_code, _, _, query_code, _ = _TABLE[self.failure]
        return query_code if protocol is Protocol.QUERY else json_code

    def status(self, protocol: Protocol) -> int:
        _, json_status, rest_status, _, query_status = _TABLE[self.failure]
        if protocol is Protocol.QUERY:
            return query_status
        return rest_status if protocol is Protocol.REST_JSON else json_status

    def render(self, protocol: Protocol) -> Rendered:
        """Status, headers and body in the protocol's own error shape (what botocore parses)."""
        return render_error(protocol, self.code(protocol), self.status(protocol), self.message)


# --- Messages -------------------------------------------------------------------------------

CLOCK_SKEW = timedelta(minutes=5)


def _amz(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%SZ")


def unsigned() -> AuthError:
    return AuthError(Failure.UNSIGNED, "Missing Authentication Token")


def unknown_key() -> AuthError:
    return AuthError(Failure.UNKNOWN_KEY, "The security token included in the request is invalid.")


def bad_signature() -> AuthError:
    return AuthError(Failure.BAD_SIGNATURE,
                     "The request signature we calculated does not match the signature you "
                     "provided. Check your AWS Secret Access Key and signing method. Consult the "
                     "service documentation for details.")


def expired(signed_at: datetime, now: datetime) -> AuthError:
    return AuthError(Failure.BAD_SIGNATURE,
                     f"Signature expired: {_amz(signed_at)} is now earlier than "
                     f"{_amz(now - CLOCK_SKEW)} ({_amz(now)} - 5 min.)")


def not_yet_current(signed_at: datetime, now: datetime) -> AuthError:
    return AuthError(Failure.BAD_SIGNATURE,
                     f"Signature not yet current: {_amz(signed_at)} is still later than "
                     f"{_amz(now + CLOCK_SKEW)} ({_amz(now)} + 5 min.)")


def wrong_scope(message: str) -> AuthError:
    # Texts from IAM's "Troubleshoot signed requests" page.
    return AuthError(Failure.BAD_SIGNATURE, message)


def incomplete(message: str) -> AuthError:
    return AuthError(Failure.INCOMPLETE, message)


def access_denied(principal_arn: str, action: str, resource: str, explicit: bool) -> AuthError:
    on = "" if resource == "*" else f" on resource: {resource}"
    why = ("with an explicit deny in an identity-based policy" if explicit
           else f"because no identity-based policy allows the {action} action")
    return AuthError(Failure.DENIED,
                     f"User: {principal_arn} is not authorized to perform: {action}{on} {why}")


def repeated_parameter(message: str) -> AuthError:
    return AuthError(Failure.REPEATED_PARAMETER, message)
