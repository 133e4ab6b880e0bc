"""Black-box interop with the ``babelqueue`` SDK over live brokers (its public API only)."""
