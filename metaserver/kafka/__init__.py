"""The MetaServer's Kafka side: its admin connection to each secured cluster, the ACL bindings and SCRAM principals
it keeps there (the reconciler), and the reads and offset resets it runs for people.
"""
