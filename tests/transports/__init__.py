"""Transport tests: the shared contract (contract.py) and one module per transport."""
