"""Hook runners: where a source's hooks run (``base`` says the contract)."""
