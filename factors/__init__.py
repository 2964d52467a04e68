"""The CO2 calculator: organisational units, carbon reports and their modules, data
entries, emission factors and emissions, with a fast interactive path and a bulk path
made of jobs (see ``factors.services`` and ``factors.handlers``)."""
