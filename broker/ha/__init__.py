"""HA replication of the commitlog from a master to its slaves (RocketMQ's HAService).

A master listens on its HA address (ha_service.py, one HAConnection per slave); a slave connects
to its master's (ha_client.py, RocketMQ's HAClient), reports the end of its log and receives the
master's log bytes from there, appending them at exactly their phy_offsets, so both logs are
byte-identical up to the slave's end. A SYNC_MASTER's puts wait for a slave to report an offset
past them (ha_service.py ``replica_wait``). The wire format is in protocol.py.
"""
