"""Fail-closed code sandbox: backends that run untrusted code, and the verifier that grades it."""
