#!/usr/bin/env sh
# Encode a message, inspect it, and see how a consumer judges good and bad bodies.
# Run from the repository root: sh examples/encode_and_inspect.sh
set -eu
BABELQ=${BABELQ:-.venv/bin/babelq}

echo "== the canonical bytes every SDK produces for this message"
body=$("$BABELQ" encode urn:babel:orders:created '{"order_id": 1042, "note": "Café"}' --queue orders)
echo "$body"

echo "== what a consumer sees"
echo "$body" | "$BABELQ" inspect --brief

echo "== one good body, one rejected (schema_version 2), one poison (not JSON): exit status 1"
{
  echo "$body"
  echo '{"job":"urn:babel:orders:created","trace_id":"t","data":{},"meta":{"schema_version":2},"attempts":0}'
  echo 'not json'
} | "$BABELQ" inspect --brief || echo "(exit status $?: not every body is accepted)"

echo "== the cross-SDK conformance suite"
"$BABELQ" conformance tests/conformance
