"""Adapters to real public data: CDNOW transactions and the Open Bandit Dataset."""
