"""The NameServer (RocketMQ's namesrv): brokers register their topics here; routes are read here.

State is soft: a restarted NameServer is filled again by the brokers' next registrations.
"""
