"""Domain-free intake shared by the pipelines: reading what tenants point us at.

``intake.http_sources`` fetches tenant-supplied URLs under the outbound rules (public
addresses only unless allow-listed, every hop checked, a total deadline, a size bound).
Nothing here knows a domain app or the job engine: callers turn its errors into their
own outcomes.
"""
